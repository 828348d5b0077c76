//! `rexctl completions`: shell completion scripts (clap_complete).

use std::io::Write;

use clap::CommandFactory;
use clap_complete::Shell;

use crate::ui::StdoutError;

/// Print a completion script for a shell.
///
/// Source it, or install it where the shell looks for completions: for
/// bash, ~/.local/share/bash-completion/completions/rexctl (or
/// /usr/share/bash-completion/completions/rexctl); for zsh, a file _rexctl
/// in a directory of $fpath; for fish,
/// ~/.config/fish/completions/rexctl.fish.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The shell.
    #[arg(value_enum)]
    shell: Shell,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut crate::Cli::command(), "rexctl", &mut script);
    let mut out = std::io::stdout().lock();
    out.write_all(&script).map_err(StdoutError)?;
    Ok(0)
}
