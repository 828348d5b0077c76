//! `rexctl man` (hidden): generate the man pages in `man/` from the clap
//! definitions, so they can never drift from the real options. A test
//! regenerates them and fails when the committed pages are stale.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::CommandFactory;
use clap_mangen::Man;

/// Exit status text, shown by `rexctl --help` and in `rexctl(1)`.
pub const EXIT_STATUS_HELP: &str = "\
Exit status:
  0  success (flush: pushed, or nothing was due)
  1  unexpected failure (I/O error, internal error)
  2  bad command line
  3  bad data: a corrupt or inconsistent checkpoint file or chain
  4  busy: another rexctl holds the job's lock
  5  configuration error: invalid option values or configuration
  6  mismatch: a restored image differs from the expected one";

/// Generate man pages.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Directory to write the pages into.
    #[arg(long, default_value = "man")]
    out: PathBuf,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("{}: create directory", a.out.display()))?;
    let mut top = crate::Cli::command().disable_help_subcommand(true);
    top.build();
    let subs: Vec<clap::Command> = top
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let names: Vec<String> = subs
        .iter()
        .map(|s| s.get_display_name().unwrap_or(s.get_name()).to_string())
        .collect();
    write_page(&a.out, top.clone(), true, &names)?;
    for s in subs {
        write_page(&a.out, s, false, &names)?;
    }
    Ok(0)
}

fn write_page(
    dir: &std::path::Path,
    cmd: clap::Command,
    top: bool,
    all: &[String],
) -> anyhow::Result<()> {
    let man = Man::new(cmd.clone());
    let path = dir.join(man.get_filename());
    let mut buf = Vec::new();
    man.render_title(&mut buf)?;
    man.render_name_section(&mut buf)?;
    man.render_synopsis_section(&mut buf)?;
    man.render_description_section(&mut buf)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut buf)?;
    }
    if cmd.has_subcommands() {
        man.render_subcommands_section(&mut buf)?;
    }
    if top {
        writeln!(buf, ".SH \"EXIT STATUS\"")?;
        for line in EXIT_STATUS_HELP.lines().skip(1) {
            let line = line.trim();
            let (code, text) = line.split_once(' ').unwrap_or((line, ""));
            writeln!(buf, ".TP\n{code}\n{}", escape(text.trim()))?;
        }
        writeln!(buf, ".SH ENVIRONMENT")?;
        writeln!(buf, ".TP\nREX_L1, REX_L2, REX_CONFIG, REX_MTBF, ...")?;
        writeln!(
            buf,
            "{}",
            escape(
                "Configuration of flush and plan; see rex.toml(5) for every variable and the precedence."
            )
        )?;
        writeln!(buf, ".TP\nREX_FAILPOINT=N")?;
        writeln!(
            buf,
            "{}",
            escape(
                "For crash tests: abort the process (as kill -9 would) at the N-th durable file operation."
            )
        )?;
    }
    writeln!(buf, ".SH \"SEE ALSO\"")?;
    let mut see: Vec<String> = Vec::new();
    if !top {
        see.push("\\fBrexctl\\fR(1)".into());
    }
    for n in all {
        if Some(n.as_str()) != cmd.get_display_name() {
            see.push(format!("\\fB{}\\fR(1)", escape(n)));
        }
    }
    see.push("\\fBrex\\-ic\\fR(5)".into());
    see.push("\\fBrex\\-l2\\fR(5)".into());
    see.push("\\fBrex.toml\\fR(5)".into());
    writeln!(buf, "{}", see.join(", "))?;
    if cmd.get_version().is_some() {
        man.render_version_section(&mut buf)?;
    }
    std::fs::write(&path, buf).with_context(|| format!("{}: write", path.display()))?;
    Ok(())
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('-', "\\-")
}
