#!/usr/bin/env bash
# The MPI bench (issue 14): collective pushes of an MPI job against each
# rank pushing alone, on 2, 4 and 8 ranks with 0 %, 50 % and 90 % of every
# rank's memory shared, side by side in one run. Prints a Markdown table:
# L2 bytes and wall time of the push (mpirun end to end) of both, and the
# ratios; then the bytes replication-aware partner copies send (K = 3,
# `rexctl replicate`) against K - 1 whole copies of every checkpoint.
# Needs a rexctl built with `--features mpi` and Open MPI.
#
#   benches/mpi.sh                 # PAGES=2048 COUNT=3 PROFILE=balanced
#   RANKS="2 4" SHARED="0 0.9" benches/mpi.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --features mpi --quiet
bin=$PWD/target/release/rexctl
ranks_list=${RANKS:-2 4 8}
shared_list=${SHARED:-0 0.5 0.9}
pages=${PAGES:-2048}
count=${COUNT:-3}
profile=${PROFILE:-balanced}
root=$(mktemp -d /dev/shm/rex-mpi-bench.XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$root"' EXIT
asroot=()
[ "$(id -u)" = 0 ] && asroot=(--allow-run-as-root)
mpi() { mpirun --oversubscribe "${asroot[@]}" --timeout 600 -np "$@"; }
bytes() { find "$1" -type f -name 'g*' -printf '%s\n' | awk '{s+=$1} END {print s+0}'; }
now() { date +%s.%N; }

k=${K:-3}
echo "| ranks | shared | per-rank L2 | collective L2 | ratio | ideal | per-rank push s | collective push s | time ratio | K=$k copies: sent / whole copies | page views: filter / hash list | pages resent |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for n in $ranks_list; do
    for sh in $shared_list; do
        d=$root/$n-$sh
        "$bin" -q gen --ranks "$n" --shared "$sh" --pages "$pages" --count "$count" \
            --profile "$profile" "$d/l1"
        cp -r "$d/l1" "$d/l1-alone"
        cp -r "$d/l1" "$d/l1-rep"
        mkdir -p "$d/l2" "$d/l2-alone"
        # Every rank pushes alone, at the same time, as a job's ranks would.
        t0=$(now)
        mpi "$n" sh -c 'exec "$0" -q push-l2 --l1 "$1/$OMPI_COMM_WORLD_RANK" --l2 "$2/$OMPI_COMM_WORLD_RANK"' \
            "$bin" "$d/l1-alone" "$d/l2-alone"
        t1=$(now)
        mpi "$n" "$bin" -q push-l2 --collective --l1 "$d/l1" --l2 "$d/l2"
        t2=$(now)
        rep=$(mpi "$n" "$bin" replicate --l1 "$d/l1-rep" --replicas "$k" |
            awk '{ for (i = 1; i <= NF; i++) { if ($i == "sent") s += $(i + 1); if ($i == "of") f += $(i + 1)
                                               if ($i == "views") v += $(i + 1); if ($i == "lists:") h += $(i + 1)
                                               if ($i == "resent") r += $(i - 2) } }
                 END { printf "%.3f | %.3f | %d", (f > 0 ? s / f : 0), (h > 0 ? v / h : 0), r }')
        a=$(bytes "$d/l2-alone")
        c=$(bytes "$d/l2")
        awk -v n="$n" -v sh="$sh" -v a="$a" -v c="$c" -v t0="$t0" -v t1="$t1" -v t2="$t2" -v rep="$rep" 'BEGIN {
            ideal = sh / n + (1 - sh)
            printf "| %d | %.0f %% | %.2f MiB | %.2f MiB | %.3f | %.3f | %.2f | %.2f | %.2f | %s |\n",
                n, sh * 100, a / 1048576, c / 1048576, c / a, ideal, t1 - t0, t2 - t1, (t2 - t1) / (t1 - t0), rep
        }'
        rm -rf "$d"
    done
done
echo
echo "pages per rank $pages ($profile), 1 FULL + $count incrementals pushed in one batch; ideal = shared/ranks + (1 - shared): every shared page stored once, every other page once per rank, before compression"
