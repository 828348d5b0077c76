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
  1  unexpected failure (I/O error, a full disk, internal error; a file that shrank or failed while it was read through its mapping, SIGBUS, which names the file and byte)
  2  the command line does not parse: an unknown option, a missing or malformed value (clap names the option or REX_* variable)
  3  bad data: a corrupt or inconsistent checkpoint file or chain, or no checkpoint where one is needed
  4  busy: another rexctl holds the job's lock
  5  the settings cannot be used: a configuration file missing or invalid, a value out of range, an L1 directory that is not there, an unusable L2 location, no job name for a bucket, an output that exists, pages outside the image
  6  mismatch: a restored image differs from the expected one
  ranks  of an MPI job (--collective) exit alike: a rank whose command fails because another rank's did exits with that rank's status (the lowest failed rank's), so that mpirun's status does not depend on which rank ends first
  128+N  ended by signal N, as a shell reports it: SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM and SIGXCPU first remove the temporary files of outputs not yet published and their scratch directories, so nothing half written is left (capture instead ends after the checkpoint in progress; a signal ignored when rexctl started, as under nohup, stays ignored); SIGXFSZ is ignored, so a file-size limit is an error (exit 1)";

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
    // clap_mangen prints an option's long help, else its help unless
    // `hide_short_help` is set: the settings hidden from `-h` (one-line
    // docs have no long help) would have no text at all in the page.
    let cmd = cmd.mut_args(|a| match (a.get_long_help(), a.get_help().cloned()) {
        (None, Some(help)) => a.long_help(help),
        _ => a,
    });
    let man = Man::new(cmd.clone());
    let path = dir.join(man.get_filename());
    let mut buf = Vec::new();
    man.render_title(&mut buf)?;
    man.render_name_section(&mut buf)?;
    synopsis(&mut buf, &cmd, top)?;
    man.render_description_section(&mut buf)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut buf)?;
    }
    if cmd.has_subcommands() {
        man.render_subcommands_section(&mut buf)?;
    }
    writeln!(buf, ".SH \"EXIT STATUS\"")?;
    for line in EXIT_STATUS_HELP.lines().skip(1) {
        let line = line.trim();
        let (code, text) = line.split_once(' ').unwrap_or((line, ""));
        writeln!(buf, ".TP\n{code}\n{}", escape(text.trim()))?;
    }
    if let Some(ex) = cmd
        .get_display_name()
        .and_then(|n| crate::cmd::examples::of(n.strip_prefix("rexctl-").unwrap_or(n)))
    {
        writeln!(buf, ".SH EXAMPLES")?;
        let mut lines = ex.lines().skip(1).peekable();
        while let Some(l) = lines.next() {
            let command = l.trim().strip_prefix("$ ").unwrap_or(l.trim());
            writeln!(buf, ".TP\n\\fB{}\\fR", escape(command))?;
            while let Some(d) = lines.next_if(|d| d.starts_with("      ")) {
                writeln!(buf, "{}", escape(d.trim()))?;
            }
        }
    }
    if top {
        writeln!(buf, ".SH ENVIRONMENT")?;
        writeln!(
            buf,
            ".TP\nREX_L1, REX_L2, REX_CONFIG, REX_JOB, REX_MTBF, ..."
        )?;
        writeln!(
            buf,
            "{}",
            escape(
                "Every setting of every command: the flag --max-age is the variable REX_MAX_AGE and the rex.toml key max_age; see rex.toml(5) for every variable and the precedence."
            )
        )?;
        writeln!(buf, ".TP\nREX_FAILPOINT=N")?;
        writeln!(
            buf,
            "{}",
            escape(
                "For crash tests: abort the process (SIGABRT, status 134; like kill -9, nothing after that point runs) at the N-th durable file operation."
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

/// SYNOPSIS with the values of options (`-o FILE`), the command's own
/// options first, then `[SETTINGS]` and `[GLOBAL OPTIONS]` for the shared
/// ones (listed under OPTIONS).
fn synopsis(buf: &mut Vec<u8>, cmd: &clap::Command, top: bool) -> anyhow::Result<()> {
    let name = cmd
        .get_display_name()
        .unwrap_or(cmd.get_name())
        .replacen('-', " ", 1);
    let name = if top { "rexctl".to_string() } else { name };
    let mut words = vec![format!("\\fB{}\\fR", escape(&name))];
    let shared = |a: &clap::Arg| {
        a.is_global_set()
            || a.get_help_heading()
                .is_some_and(|h| h.starts_with("Settings") || h.starts_with("Global"))
    };
    let mut settings = false;
    let mut global = false;
    for a in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        let id = a.get_id().as_str();
        if id == "help" || id == "version" {
            continue;
        }
        if shared(a) {
            if a.is_global_set()
                || a.get_help_heading()
                    .is_some_and(|h| h.starts_with("Global"))
            {
                global = true;
            } else {
                settings = true;
            }
            continue;
        }
        let value = a
            .get_value_names()
            .map(|v| v.join(" "))
            .unwrap_or_else(|| id.to_ascii_uppercase());
        let takes = a.get_num_args().is_some_and(|n| n.takes_values())
            && !matches!(
                a.get_action(),
                clap::ArgAction::SetTrue | clap::ArgAction::Count
            );
        let word = if a.is_positional() {
            let many = a.get_num_args().is_some_and(|n| n.max_values() > 1);
            format!(
                "\\fI{}\\fR{}",
                escape(&value),
                if many { "..." } else { "" }
            )
        } else {
            let flag = match (a.get_short(), a.get_long()) {
                (Some(s), _) => format!("\\fB\\-{s}\\fR"),
                (None, Some(l)) => format!("\\fB\\-\\-{}\\fR", escape(l)),
                _ => continue,
            };
            if takes {
                format!("{flag} \\fI{}\\fR", escape(&value))
            } else {
                flag
            }
        };
        words.push(if a.is_required_set() {
            word
        } else {
            format!("[{word}]")
        });
    }
    if settings {
        words.push("[\\fISETTINGS\\fR]".into());
    }
    if global || top {
        words.push("[\\fIGLOBAL OPTIONS\\fR]".into());
    }
    if top {
        words.push("\\fICOMMAND\\fR".into());
    }
    writeln!(buf, ".SH SYNOPSIS\n{}", words.join(" "))?;
    Ok(())
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('-', "\\-")
}
