#!/usr/bin/env bash
# Hostile memory: what a push costs when the job's memory holds patterns
# crafted to collide in the DeD-Table (a job that keeps data its users sent
# can hold anything). Three memories of the same size, each checkpointed by
# a C job through librex (one FULL checkpoint) and pushed with both hashes:
#   plain  distinct pseudo-random patterns;
#   xxh3   patterns unkeyed XXH3-64 sends to one value (bytes 0..8 and
#          16..24 are XXH3's published secret: both 16-byte products vanish);
#   crc32  patterns sharing one CRC-32 (XORs of vectors of the kernel of
#          CRC-32's linear part: it is affine over GF(2)).
# Prints a Markdown table of push-l2 wall seconds and the ratio to plain.
# The same forgeries are unit tests in src/lib/l2/dedup_table.rs.
#
# ZSTD_LEVEL=0 stores the chunks raw, leaving the DeD-Table's cost alone
# (the compressor's own speed depends on what it compresses).
#
#   benches/hostile.sh               # MIB="8 32 128"
#   MIB=32 ZSTD_LEVEL=0 REXCTL=/old/rexctl LIBREX_DIR=/old benches/hostile.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${REXCTL:-}" ]; then
    cargo build --release --quiet
fi
bin=${REXCTL:-$PWD/target/release/rexctl}
libdir=${LIBREX_DIR:-$PWD/target/release}
root=$(mktemp -d /dev/shm/rex-hostile.XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$root"' EXIT

cat > "$root/job.c" <<'EOF'
/* Checkpoints SIZE bytes read from FILE once: job FILE SIZE */
#include <stdio.h>
#include <stdlib.h>
#include "rex.h"
int main(int argc, char **argv) {
    size_t n = strtoull(argv[2], 0, 10);
    unsigned char *p = aligned_alloc(4096, n);
    FILE *f = fopen(argv[1], "rb");
    if (!p || !f || fread(p, 1, n, f) != n) { perror(argv[1]); return 1; }
    fclose(f);
    if (rex_init(NULL) || rex_protect(1, p, n) || rex_checkpoint() ||
        rex_checkpoint_wait() || rex_finalize()) {
        fprintf(stderr, "librex: %s\n", rex_last_error());
        return 1;
    }
    return 0;
}
EOF
cc -O2 "$root/job.c" -Iinclude -L"$libdir" -lrexctl -Wl,-rpath,"$libdir" -o "$root/job"

cat > "$root/forge.py" <<'EOF'
import struct, sys, zlib
kind, size, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
n = size // 32
secret = bytes.fromhex("b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f")
buf = bytearray()
if kind == "plain":
    for i in range(n):
        a = (i * 0x9E3779B97F4A7C15) & (2**64 - 1)
        buf += struct.pack("<4Q", a ^ 0x1234567, a, (i * 7 + 1) & (2**64 - 1), i)
elif kind == "xxh3":
    for i in range(n):
        a = (i * 0x9E3779B97F4A7C15) & (2**64 - 1)
        buf += secret[:8] + struct.pack("<Q", a) + secret[16:24] + struct.pack("<Q", i)
else:
    zero = zlib.crc32(bytes(32))
    basis, kernel = {}, []
    for bit in range(256):
        b = bytearray(32)
        b[bit // 8] = 1 << (bit % 8)
        v, c = zlib.crc32(bytes(b)) ^ zero, 1 << bit
        while v:
            p = v.bit_length() - 1
            if p in basis:
                v ^= basis[p][0]
                c ^= basis[p][1]
            else:
                basis[p] = (v, c)
                break
        if v == 0:
            kernel.append(c)
    c = kernel[40]
    for i in range(1, n + 1):  # a Gray code over the kernel: all distinct
        c ^= kernel[(i & -i).bit_length() - 1]
        buf += c.to_bytes(32, "little")
open(out, "wb").write(buf)
EOF

now() { date +%s.%N; }
echo "| MiB | memory | push s, crc32 (default) | ratio to plain | push s, xxh3 | ratio to plain |"
echo "| ---: | --- | ---: | ---: | ---: | ---: |"
for mib in ${MIB:-8 32 128}; do
    size=$((mib << 20))
    declare -A base=()
    for kind in plain xxh3 crc32; do
        python3 "$root/forge.py" "$kind" "$size" "$root/mem"
        rm -rf "$root/l1" "$root/l2"
        mkdir "$root/l1"
        REX_L1=$root/l1 REX_L2=$root/l2 REX_L2_THREAD=false "$root/job" "$root/mem" "$size"
        label=$kind; [ "$kind" = plain ] || label=$kind-crafted
        row="| $mib | $label |"
        for hash in crc32 xxh3; do
            rm -rf "$root/l1c" "$root/l2c"
            cp -r "$root/l1" "$root/l1c"
            t0=$(now)
            "$bin" push-l2 --l1 "$root/l1c" --l2 "$root/l2c" --hash "$hash" \
                ${ZSTD_LEVEL:+--zstd-level "$ZSTD_LEVEL"} >/dev/null
            t=$(echo "$(now) - $t0" | bc -l)
            [ "$kind" = plain ] && base[$hash]=$t
            row="$row $(printf %.2f "$t") | $(printf %.1fx "$(echo "$t / ${base[$hash]}" | bc -l)") |"
        done
        echo "$row"
    done
done
