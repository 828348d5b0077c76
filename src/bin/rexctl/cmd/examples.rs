//! The examples of every subcommand: shown by `--help` and in the EXAMPLES
//! section of its man page (`cmd::man` parses them back: a line starting
//! with `  $ ` is a command, the indented lines after it say what it does).

/// `rexctl gen`.
pub const GEN: &str = "\
Examples:
  $ rexctl gen l1 --profile balanced --truth truth.rexic
      A FULL checkpoint and its incrementals in l1/, the final image in truth.rexic.
  $ rexctl gen --list-profiles
      The workload profiles.";

/// `rexctl coalesce`.
pub const COALESCE: &str = "\
Examples:
  $ rexctl coalesce l1
      How much coalescing the pending batch saves.
  $ rexctl coalesce l1 --from 8 -o batch.rexic
      The batch from seq 8 on as one REX-IC file.";

/// `rexctl inspect`.
pub const INSPECT: &str = "\
Examples:
  $ rexctl inspect l1/*.rexic
      Header, counts and CRCs of every checkpoint; exit 3 if any is bad.
  $ rexctl inspect --index --json image.rexic
      The page index as JSON.";

/// `rexctl push-l2`.
pub const PUSH_L2: &str = "\
Examples:
  $ rexctl push-l2 --l1 /local/ckpt --l2 /lustre/ckpt/job42
      Push the pending batch to a directory on a parallel file system.
  $ REX_JOB=job42 rexctl push-l2 --l1 /local/ckpt --l2 s3://ckpt/site
      Push to a bucket, under site/job42/0/.
  $ rexctl push-l2 -c job42.toml --full
      Take a complete coalescence, settings from job42.toml.";

/// `rexctl restore`.
pub const RESTORE: &str = "\
Examples:
  $ rexctl restore --l2 /lustre/ckpt/job42 -o image.rexic
      After losing the node: the newest L2 generation.
  $ rexctl restore --l1 /local/ckpt --l2 /lustre/ckpt/job42 -o image.rexic
      After a transient fault: the newest state, L1 checkpoints included.
  $ rexctl restore -c job42.toml --region 3 --raw -f -o region3.bin
      One region of a librex job, as raw bytes, replacing region3.bin.";

/// `rexctl verify`.
pub const VERIFY: &str = "\
Examples:
  $ rexctl verify --l2 /lustre/ckpt/job42
      Rebuild and check every page of every generation; exit 3 if anything is wrong.
  $ rexctl verify -q -c job42.toml && echo good
      Only the exit status.";

/// `rexctl status`.
pub const STATUS: &str = "\
Examples:
  $ rexctl status --l1 /local/ckpt --l2 /lustre/ckpt/job42
      Generations, chains and pending checkpoints.
  $ rexctl status -c job42.toml --json
      The same as JSON.";

/// `rexctl flush`.
pub const FLUSH: &str = "\
Examples:
  $ rexctl flush -c /etc/rex/job42.toml
      Push if an L2 checkpoint is due: one log line.
  $ rexctl flush -c /etc/rex/job42.toml --dry-run -v
      What the controller would decide, and why.
  * * * * * rexctl flush -c /etc/rex/job42.toml >>/var/log/rex-job42.log 2>&1
      A crontab line (contrib/crontab; systemd: contrib/systemd/rex-flush@.timer).";

/// `rexctl plan`.
pub const PLAN: &str = "\
Examples:
  $ rexctl plan -c job42.toml
      The interval table, where the job sits in it, and the decision.";

/// `rexctl gc`.
pub const GC: &str = "\
Examples:
  $ rexctl gc --l2 s3://ckpt/site --job job42 -n
      What would be deleted (dry run).
  $ rexctl gc -c job42.toml --grace 0
      Delete every unreferenced object now (no push may be running).";

/// `rexctl demo`.
pub const DEMO: &str = "\
Examples:
  $ rexctl demo
      The whole pipeline on a generated workload, checked byte for byte.
  $ rexctl demo --profile churn --json
      Another profile, as JSON.";

/// `rexctl capture`.
pub const CAPTURE: &str = "\
Examples:
  $ rexctl capture --l1 ckpt --interval 2 --count 12 -- ./my-simulation input.dat
      Twelve checkpoints of a program rexctl starts.
  $ rexctl capture --l1 ckpt --interval 5 --pid 4242
      Attach to a running process until it exits or Ctrl-C.";

/// `rexctl analyze`.
pub const ANALYZE: &str = "\
Examples:
  $ rexctl analyze ckpt --svg ckpt.svg
      What REX would buy on these checkpoints, with the figures as a chart.";

/// `rexctl compare`.
pub const COMPARE: &str = "\
Examples:
  $ rexctl gen wl && rexctl compare wl --batch 4
      REX beside the paper's counterparts on a generated workload.
  $ rexctl compare ckpt --svg ckpt.svg
      On a capture of your own program, with a chart.";

/// `rexctl completions`.
pub const COMPLETIONS: &str = "\
Examples:
  $ rexctl completions bash > ~/.local/share/bash-completion/completions/rexctl
      Bash completion for the current user.
  $ rexctl completions zsh > \"${fpath[1]}/_rexctl\"
      Zsh completion.";

/// `rexctl replicate`.
pub const REPLICATE: &str = "\
Examples:
  $ mpirun -np 4 rexctl replicate --l1 /local/ckpt --replicas 3
      Every rank's checkpoints also on two partners, minus the pages they hold.";

/// Every page's examples, by subcommand name (for the man pages).
pub fn of(name: &str) -> Option<&'static str> {
    Some(match name {
        "gen" => GEN,
        "coalesce" => COALESCE,
        "inspect" => INSPECT,
        "push-l2" => PUSH_L2,
        "replicate" => REPLICATE,
        "restore" => RESTORE,
        "verify" => VERIFY,
        "status" => STATUS,
        "flush" => FLUSH,
        "plan" => PLAN,
        "gc" => GC,
        "demo" => DEMO,
        "capture" => CAPTURE,
        "analyze" => ANALYZE,
        "compare" => COMPARE,
        "completions" => COMPLETIONS,
        _ => return None,
    })
}
