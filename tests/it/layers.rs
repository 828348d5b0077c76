//! The library's dependencies run one way (docs/ARCHITECTURE.md): a module
//! may use `crate::` paths of its own layer and of lower layers only.
//!
//! The check reads the sources of `src/lib`, resolves every `crate::...` and
//! `super::...` path that leaves the file's layer (in code, not in comments),
//! and fails naming the file, the line and both layers. A new top-level
//! module must be given a layer here, so the table and the tree cannot drift.

use std::path::{Path, PathBuf};

/// The layers, lowest first. Modules of one layer may use each other.
/// `Error` and `Result` are the root's re-exports of `error`.
const LAYERS: &[(&str, u8)] = &[
    ("error", 0),
    ("Error", 0),
    ("Result", 0),
    ("durable", 0),
    ("mapped", 0),
    ("format", 1),
    ("store", 2),
    ("l1", 3),
    ("l2", 4),
    ("control", 5),
    ("eval", 6),
    ("job", 6),
];

fn layer_of(top: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == top).map(|(_, l)| *l)
}

/// One use of a higher layer.
#[derive(Debug, PartialEq)]
struct Violation {
    file: String,
    line: usize,
    from: String,
    to: String,
}

/// The module path of a file under `src/lib` (`l2/push.rs` -> `[l2, push]`,
/// `l2/mod.rs` -> `[l2]`).
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

/// Code without comments (line comments, doc comments, block comments).
/// String literals are kept; a path inside a string is not a dependency but
/// no source writes one, and a false alarm is better than a missed import.
fn code_lines(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_block = 0usize;
    for line in src.lines() {
        let mut kept = String::new();
        let b = line.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if in_block > 0 {
                if b[i..].starts_with(b"*/") {
                    in_block -= 1;
                    i += 2;
                } else if b[i..].starts_with(b"/*") {
                    in_block += 1;
                    i += 2;
                } else {
                    i += 1;
                }
            } else if b[i..].starts_with(b"//") {
                break;
            } else if b[i..].starts_with(b"/*") {
                in_block += 1;
                i += 2;
            } else {
                kept.push(b[i] as char);
                i += 1;
            }
        }
        out.push(kept);
    }
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level modules a piece of code names through `crate::` (including
/// `crate::{a::x, b}` groups) and through `super::` chains that reach the
/// crate root, given the module path of its file.
fn referenced_tops(code: &str, module: &[String]) -> Vec<String> {
    let mut tops = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let boundary = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if boundary && rest.starts_with("crate::") {
            let after = &rest["crate::".len()..];
            if let Some(group) = after.strip_prefix('{') {
                // Top-level items of the group, at brace depth 0.
                let mut depth = 0i32;
                let mut start = 0;
                for (k, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => {
                            tops.push(ident_at(group[start..].trim_start()).to_string());
                            break;
                        }
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            tops.push(ident_at(group[start..].trim_start()).to_string());
                            start = k + 1;
                        }
                        _ => {}
                    }
                }
            } else {
                tops.push(ident_at(after).to_string());
            }
            i += "crate::".len();
            continue;
        }
        if boundary && rest.starts_with("super::") {
            let mut ups = 0;
            let mut r = rest;
            while let Some(t) = r.strip_prefix("super::") {
                ups += 1;
                r = t;
            }
            // `super` from a file's module goes to its parent; reaching the
            // root (ups == module.len()) names a top-level module next.
            if ups >= module.len() {
                tops.push(ident_at(r).to_string());
            }
            i += "super::".len() * ups;
            continue;
        }
        i += rest.chars().next().map_or(1, char::len_utf8);
    }
    tops.retain(|t| !t.is_empty() && t != "self");
    tops
}

/// Checks one source file; `rel` is its path under `src/lib`.
fn check_source(rel: &Path, src: &str) -> Result<Vec<Violation>, String> {
    let module = module_path(rel);
    let Some(own_top) = module.first() else {
        return Ok(Vec::new()); // lib.rs: the root re-exports everything
    };
    let own = layer_of(own_top).ok_or_else(|| {
        format!(
            "src/lib/{}: top-level module `{own_top}` has no layer in tests/it/layers.rs (and docs/ARCHITECTURE.md)",
            rel.display()
        )
    })?;
    let mut found = Vec::new();
    for (n, line) in code_lines(src).iter().enumerate() {
        for top in referenced_tops(line, &module) {
            let layer = layer_of(&top).ok_or_else(|| {
                format!(
                    "src/lib/{}:{}: `crate::{top}` is not a known top-level module",
                    rel.display(),
                    n + 1
                )
            })?;
            if layer > own {
                found.push(Violation {
                    file: format!("src/lib/{}", rel.display()),
                    line: n + 1,
                    from: own_top.clone(),
                    to: top,
                });
            }
        }
    }
    Ok(found)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src/lib") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn lower_layers_never_import_higher_ones() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    assert!(
        files.len() > 20,
        "found only {} files under src/lib",
        files.len()
    );
    let mut violations = Vec::new();
    for path in &files {
        let rel = path.strip_prefix(&root).unwrap();
        let src = std::fs::read_to_string(path).unwrap();
        violations.extend(check_source(rel, &src).unwrap_or_else(|e| panic!("{e}")));
    }
    let report: Vec<String> = violations
        .iter()
        .map(|v| {
            format!(
                "{}:{}: layer `{}` uses higher layer `{}`",
                v.file, v.line, v.from, v.to
            )
        })
        .collect();
    assert!(
        report.is_empty(),
        "dependencies must run one way:\n{}",
        report.join("\n")
    );
}

#[test]
fn the_check_catches_upward_imports() {
    let p = |s: &str| PathBuf::from(s);
    // A plain use, a group, a path in an expression, a super chain to the root.
    let v = check_source(&p("store/mod.rs"), "use crate::control::config::Config;\n").unwrap();
    assert_eq!(v.len(), 1);
    assert_eq!(
        (v[0].from.as_str(), v[0].to.as_str(), v[0].line),
        ("store", "control", 1)
    );
    let v = check_source(
        &p("l1/coalesce.rs"),
        "use crate::{\n format::ic, error::Result };\nuse crate::{format::ic::IcMeta, l2::push::Job};\n",
    )
    .unwrap();
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!((v[0].to.as_str(), v[0].line), ("l2", 3));
    let v = check_source(&p("format/ic.rs"), "let x = crate::l1::read_all(p)?;").unwrap();
    assert_eq!(v.len(), 1);
    let v = check_source(&p("l2/dedup.rs"), "use super::super::eval::workload;").unwrap();
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].to, "eval");
    // Same or lower layers, sibling `super::`, comments and doc links pass.
    let ok = "use crate::l1::coalesce::CList;\nuse super::chain::OpenChain;\n\
              //! see [`crate::control::flush`]\n/* crate::eval */ let y = 1; // crate::eval\n";
    assert_eq!(check_source(&p("l2/push.rs"), ok).unwrap(), vec![]);
    // An unknown top-level module is an error, so the table must be kept.
    assert!(check_source(&p("newthing/mod.rs"), "").is_err());
    assert!(check_source(&p("l2/push.rs"), "use crate::nowhere::X;").is_err());
}

/// The fields of a type that derives `Serialize` (a `--json` report) that
/// hold a path, with no `serialize_with` (`format::json_path`) just above:
/// serde fails on a path that is not UTF-8, after the command did its work
/// (helper-95: `restore --fallback --json` published its image, then
/// exited 1 on the L1 paths it left out; `status --json` on a set-aside
/// checkpoint's name).
fn raw_paths_in_reports(src: &str) -> Vec<usize> {
    let lines: Vec<&str> = src.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let Some(rest) = t.strip_prefix("pub ") else {
            continue;
        };
        let Some((_, ty)) = rest.split_once(": ") else {
            continue;
        };
        let ty = ty.trim_end_matches(',');
        if !["PathBuf", "Option<PathBuf>", "Vec<PathBuf>"].contains(&ty) {
            continue;
        }
        if i > 0 && (lines[i - 1].contains("serialize_with") || lines[i - 1].contains("serde(skip"))
        {
            continue;
        }
        // The item the field belongs to, and its attributes.
        let Some(j) = (0..i).rev().find(|&j| {
            let t = lines[j].trim_start();
            t.starts_with("pub struct ") || t.starts_with("struct ") || t.starts_with("pub enum ")
        }) else {
            continue;
        };
        let attrs = lines[j.saturating_sub(6)..j].join("\n");
        if attrs.contains("Serialize") {
            out.push(i + 1);
        }
    }
    out
}

#[test]
fn every_path_in_a_json_report_is_written_whatever_its_bytes() {
    let mut files = Vec::new();
    for d in ["src/lib", "src/bin"] {
        rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join(d), &mut files);
    }
    let mut bad = Vec::new();
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap();
        for line in raw_paths_in_reports(&src) {
            bad.push(format!("{}:{line}", f.display()));
        }
    }
    assert!(
        bad.is_empty(),
        "paths serialized without crate::format::json_path:\n{}",
        bad.join("\n")
    );
    // The check finds one.
    let sample =
        "#[derive(Debug, Serialize)]\npub struct R {\n    pub left_out: Vec<PathBuf>,\n}\n";
    assert_eq!(raw_paths_in_reports(sample), vec![3]);
    let fixed = "#[derive(Serialize)]\npub struct R {\n    #[serde(serialize_with = \"x\")]\n    pub p: PathBuf,\n}\n";
    assert!(raw_paths_in_reports(fixed).is_empty());
}
