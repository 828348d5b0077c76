#!/usr/bin/env bash
# The benchmark suite's comparison: generates every named workload profile
# (`rexctl gen`), runs `rexctl compare --json` on each (REX against IC,
# IC-bzip2, IC-Xdelta3, AIC, Libhash and zstd), and rewrites the section of
# docs/PERFORMANCE.md between the lines `<!-- compare:begin -->` and
# `<!-- compare:end -->` (appended when absent) with the tables, the
# geometric means, the targets, the machine and this command. Nothing else
# in the file is touched. Each profile's report (JSON) and bars (SVG) go to
# target/compare/.
#
# Environment: SEED (default 1), RUNS (restore runs, best kept; default 5),
# PUSH_RUNS (runs of each counterpart's L2 checkpoints, best kept; default 3),
# PROFILES (space-separated; default all), REAL (real-program workloads
# captured with `rexctl capture --workload`, space-separated; default
# "python-array xz sqlite", empty for none), DOC (default docs/PERFORMANCE.md).
# The work happens on /dev/shm when it exists (fsyncs then cost nothing and
# the figures are the algorithms'), else in $TMPDIR.
set -euo pipefail
cd "$(dirname "$0")/.."

seed="${SEED:-1}"
runs="${RUNS:-5}"
push_runs="${PUSH_RUNS:-3}"
doc="${DOC:-docs/PERFORMANCE.md}"

features=()
if [ -n "${LIBCLANG_PATH:-}" ] || ldconfig -p 2>/dev/null | grep -Eq '[[:space:]]libclang(-[0-9.]+)?\.so'; then
    features=(--features xdelta3)
else
    echo "compare.sh: libclang not found: IC-Xdelta3 and AIC will be reported as not built" >&2
fi
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    scratch="$(mktemp -d /dev/shm/rexctl-bench.XXXXXX)"
else
    scratch="$(mktemp -d "${TMPDIR:-/tmp}/rexctl-bench.XXXXXX")"
fi
trap 'rm -rf "$scratch"' EXIT

cargo build --release --locked "${features[@]}"
# A private copy: another build in this tree must not swap the binary (and
# its features) in the middle of the run.
bin="$scratch/rexctl"
cp target/release/rexctl "$bin"

load="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || true)"
profiles="${PROFILES:-$("$bin" gen --list-profiles | awk '{print $1}')}"
mkdir -p target/compare
jsons=()
for p in $profiles; do
    echo "== $p" >&2
    "$bin" gen "$scratch/$p" --profile "$p" --seed "$seed" >/dev/null
    TMPDIR="$scratch" "$bin" compare "$scratch/$p" --json --label "$p" --runs "$runs" --push-runs "$push_runs" \
        --svg "target/compare/$p.svg" >"target/compare/$p.json"
    jsons+=("target/compare/$p.json")
    rm -rf "${scratch:?}/$p"
done

# Real memory: each real-program workload that is installed, captured while
# it runs (9 checkpoints 0.4 s apart), compared the same way.
for w in ${REAL-python-array xz sqlite}; do
    case "$w" in python-array) exe=python3 ;; sqlite) exe=sqlite3 ;; *) exe="$w" ;; esac
    if ! command -v "$exe" >/dev/null; then
        echo "compare.sh: $exe not found: the real-$w capture is left out" >&2
        continue
    fi
    echo "== real-$w" >&2
    "$bin" capture --l1 "$scratch/real-$w" --interval 0.4 --count 9 --workload "$w" -q
    TMPDIR="$scratch" "$bin" compare "$scratch/real-$w" --json --label "real-$w" --runs "$runs" --push-runs "$push_runs" \
        --svg "target/compare/real-$w.svg" >"target/compare/real-$w.json"
    jsons+=("target/compare/real-$w.json")
    rm -rf "${scratch:?}/real-$w"
done

model="$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)"
machine="${model:-unknown CPU}, $(nproc) CPUs, $(free -g 2>/dev/null | awk '/^Mem:/ {print $2 " GiB"}') RAM; Linux $(uname -r); $(rustc --version)${load:+; load average $load at the start}"
command="benches/compare.sh"
[ "$seed" = 1 ] || command="SEED=$seed $command"
[ "$runs" = 5 ] || command="RUNS=$runs $command"
[ "$push_runs" = 3 ] || command="PUSH_RUNS=$push_runs $command"
[ -z "${PROFILES:-}" ] || command="PROFILES='$PROFILES' $command"
[ "${REAL-unset}" = unset ] || command="REAL='$REAL' $command"
"$bin" compare --summarize "${jsons[@]}" --update "$doc" --machine "$machine" --command "$command"
