//! The DeD-Table: the deduplication unit's index from pattern contents to
//! pattern pointer (Sigdel & Tzeng, TPDS 2018, section 3.2.3).
//!
//! Memory pages are cut into fixed patterns of P bytes (16, 32, 64 or 128).
//! Each unique pattern is appended to a ΔRPS file and addressed by a `u32`
//! pointer; the DeD-Table answers "has this batch already seen these bytes,
//! and under which pointer?". It starts empty at every batch ([`clear`]).
//!
//! # Layout
//!
//! The table is a cuckoo hash table with two hash functions, as the paper
//! prescribes, but with 4-way set-associative buckets where the paper has
//! 2-way. A bucket is 32 bytes (`tag: [u32; 4]`, `ptr: [u32; 4]`, 32-byte
//! aligned), so a bucket never straddles a cache line. With 2-way buckets a
//! first bucket was full often enough that the demand miss on the second
//! one was the unit's largest stall (perf); 4 ways in the same bytes per
//! slot made the unit alone 10-12 % faster (`cargo bench --bench pipeline`,
//! balanced, Δ and full batches), with the same answers. A probe reads its first bucket, and its second
//! one only when the first is full (see *One line per probe* below), so it
//! usually touches one line, which [`DedupTable::prefetch`] can request
//! ahead of time. Large bucket arrays are allocated with `MADV_HUGEPAGE`
//! on Linux, so that random probes do not also miss the TLB.
//!
//! An entry is a pointer and a tag, 8 bytes, not a copy of the pattern: the
//! patterns already live in the caller's buffers (the previous RPS files
//! mapped in memory, the ΔRPS being built), so the table reads them through a
//! *resolver* `FnMut(u32) -> &[u8]` passed to each call. At the maximum load
//! of 3/4, and because [`with_capacity`] sizes the table exactly (bucket
//! counts need not be powers of two), a table pre-sized for its final entry
//! count costs 8 / 0.75 ≈ 10.7 bytes per entry; one that had to double, or
//! was sized for twice its final count, up to 21.3.
//!
//! # Why the tag
//!
//! The tag is the second hash with its low bit forced to 1 (`h2 | 1`). It does
//! three jobs:
//!
//! * **Filter.** A slot's pattern is resolved and compared only when its tag
//!   equals the probe's. A false match costs one resolver call and happens
//!   with probability about 2⁻³¹ per occupied slot probed. Without the tag,
//!   every probe would read up to eight patterns at random places of the RPS
//!   files, a cache miss each.
//! * **Empty marker.** Tag 0 never occurs, so it marks a free slot and every
//!   `u32` (including `u32::MAX`) remains usable as a pointer.
//! * **Alternate bucket.** With `n` buckets, the first bucket is
//!   `b1 = ⌊h1·n / 2³²⌋` and the second is `b2 = (s − b1) mod n` where
//!   `s = ⌊tag·n / 2³²⌋`. Since `b1 + b2 ≡ s (mod n)`, an entry sitting in
//!   either bucket finds its other one from its tag alone, so cuckoo kicks
//!   never re-read pattern bytes. `b1` depends on `h1` only and `b2` on both
//!   hashes, which keeps the two choices independent for any `n`. This is
//!   the paper's `hash(x) mod |DeD-Table|`, with a multiply-shift instead of
//!   a division, applied to the two hash functions `h1` and `s − h1`.
//!
//! # Exactness
//!
//! A hit is never taken on a hash or tag match alone: the resolved bytes are
//! compared with the probe, so two different patterns never share a pointer,
//! whatever the hash function does. A colliding hash function only costs
//! time (see the stash below). Patterns of different lengths may share a
//! table; they never compare equal.
//!
//! # One line per probe
//!
//! A bucket never loses an entry within a batch: insertions fill free
//! slots, and an eviction puts the evicted entry's replacement in the same
//! slot, so a full bucket stays full until [`clear`] or a growth (which
//! rebuilds everything). And an entry lands in its second bucket, or in the
//! stash, only when its first bucket is full (insertion tries the first
//! bucket first; an evicted entry moving to its second bucket leaves its
//! first one full with the newcomer; the stash takes entries whose two
//! buckets are full). Hence: **while an entry's first bucket has a free
//! slot, the entry is in that bucket**. A probe whose first bucket has a
//! free slot and no matching entry is a miss, without reading the second
//! bucket or the stash, and inserts into that free slot. Below the 3/4
//! load limit most first buckets have a free slot, so most probes touch one
//! cache line instead of two.
//!
//! # Insertion, eviction, stash, growth
//!
//! A new entry goes into the first free slot of `b1`, then of `b2`. When both
//! are full, entries are evicted to their alternate buckets, at most 128
//! times: at each step the two residents' alternate buckets are read (in
//! parallel) and a resident whose alternate bucket has a free slot is
//! preferred, else a random one is moved and the walk continues. The entry
//! left homeless after 128 steps goes to the *stash*, a map from tag to the
//! entries of that tag, searched after every second-bucket miss while it is
//! not empty. Nothing is ever dropped.
//!
//! The table grows (doubling the bucket count and re-hashing every entry from
//! its bytes through the resolver) before an insertion that would take the
//! bucket load past 3/4, or when the stash holds more than 16 entries while
//! the load is at least 1/2. The load condition on the second rule keeps a
//! bad hash function from making the table grow without bound: if the stash
//! fills while the table is mostly empty, the hash is degenerate (the
//! constant hasher of the tests, say), growing would not help, and the stash
//! just keeps growing, slowly but exactly. If the table cannot grow (2³¹
//! buckets, or the allocation fails), the stash takes the overflow the same
//! way. Growing is costly (every entry is resolved and re-hashed), so size
//! the table with an upper bound of the batch's pattern count.
//!
//! The 3/4 limit is measured, not taken from the theory (≈ 0.9 for two
//! hashes and two ways). With the limit lifted to 0.9, inserting 32-byte
//! patterns into a 64 Ki-entry table cost 19 ns each up to load 0.5, 26 ns
//! between 0.6 and 0.7, 33 ns between 0.7 and 0.75 (where about 30% of the
//! insertions evict, 2.5 steps on average), 45 ns up to 0.8 and 77 ns up to
//! 0.85; beyond, the stash overflowed. In an 8 Mi-entry table, where each
//! eviction step is a cache miss, the same bands cost 93, 168, 264, 461 and
//! 1014 ns.
//!
//! # Hash functions
//!
//! The paper indexes with CRC-32. [`Crc32Hasher`] does exactly that
//! (`h1` = CRC-32, `h2` the low half of XXH3-64; `push-l2` uses it by
//! default), and [`Xxh3Hasher`], this type's default, takes both hashes from
//! the two halves of one XXH3-64 (`xxhash-rust`), because CRC-32 turned out
//! to be the largest single cost of an in-cache operation. The table below
//! was measured with `crc32fast::hash` as `h1`. `Crc32Hasher` now computes
//! the same CRC-32 with a PCLMULQDQ fold specialised to whole 16-byte blocks
//! (`crc32_short`), which cut its extra cost on a 32-byte pattern by more
//! than half: in the Deduplication Unit the two hashers are now within
//! about 15% of each other (docs/PERFORMANCE.md has the current figures).
//! Measured on the development machine (a 2-vCPU Xeon Sapphire Rapids KVM
//! guest; release build; thread CPU time, best of 3; 32-byte patterns):
//!
//! | per pattern                                   | CRC-32 + XXH3 | XXH3 only |
//! |-----------------------------------------------|---------------|-----------|
//! | both hashes                                   | 7.5 ns        | 2.2 ns    |
//! | `get_or_insert`, 50% hits, 1e4 entries        | 25.4 ns       | 19.6 ns   |
//! | `get_or_insert`, 50% hits, 1e5 entries        | 37.9 ns       | 28.6 ns   |
//! | REX-like workload (below), 1e4 entries        | 18.7 ns       | 12.7 ns   |
//! | REX-like workload (below), 1e5 entries        | 28.8 ns       | 20.9 ns   |
//!
//! `crc32fast` does use PCLMULQDQ from 16 bytes on, but its fold and Barrett
//! reduction form a serial chain that a 32-byte input cannot amortise. Once
//! the table outgrows the caches the difference drowns in memory latency.
//! Hashes are never persisted, so the choice can change freely.
//!
//! Every XXH3 here is keyed, with a random key per hasher: unkeyed, memory
//! can be crafted so that all its patterns share one XXH3 (see
//! `random_key`), which sent them all to the stash. CRC-32 cannot be keyed
//! (it is affine: patterns sharing one CRC share it under any initial
//! value), so memory crafted for it shares one first bucket under
//! [`Crc32Hasher`]; their keyed tags still spread them over second buckets
//! and the stash, which is a map by tag for that reason. docs/PERFORMANCE.md
//! (*Hostile memory*) has the figures.
//!
//! # Why not `cuckoofilter`
//!
//! The `cuckoofilter` crate's `CuckooFilter` was measured as a compact filter
//! in front of this table: it was fed the 64-bit hash through a pass-through
//! `Hasher` (so it did not re-hash the pattern), and a filter negative
//! inserted into the table without probing it. It made `get_or_insert`
//! slower at every size, for 2.1–3.3 more bytes per entry:
//!
//! | entries (uniform patterns, 50% hits) | table alone | filter + table |
//! |--------------------------------------|-------------|----------------|
//! | 1e4                                  | 19.6 ns     | 35.5 ns        |
//! | 1e5                                  | 28.6 ns     | 47.5 ns        |
//! | 1e6                                  | 81.8 ns     | 135.8 ns       |
//! | 1e7                                  | 159 ns      | 287 ns         |
//!
//! The reasons are structural, so no tuning would reverse them:
//!
//! * every miss of [`get_or_insert`] is followed by an insertion into the same
//!   two buckets the probe reads, so a negative answer from the filter saves
//!   no table access; it only adds the filter's own two random cache lines;
//! * the table's 31-bit tags already filter before any pattern byte is read
//!   (about 2⁻²⁹ false matches per miss, against 0.8–1.1% measured for the
//!   filter's 8-bit fingerprints);
//! * `CuckooFilter::add` on a full filter evicts a random other fingerprint
//!   (its documented `NotEnoughSpace` behaviour): a false negative that would
//!   make the deduplication miss duplicates unless the table were probed
//!   anyway.
//!
//! # Throughput, and the prefetch pipeline
//!
//! Once the table and the patterns no longer fit the caches, an operation
//! costs memory latency: on the development machine a dependent random
//! access beyond 8 MiB takes about 180 ns. Callers that know the next
//! patterns ahead (a whole page, always) should [`hash`] them, [`prefetch`]
//! them all, then call [`get_or_insert_hashed`] on each, so that the cache
//! misses overlap. Measured (XXH3, ns per operation, best of 2–3; before
//! the one-line probe above, when `prefetch` requested both buckets, and
//! with 2-way buckets):
//!
//! | entries | uniform, plain | uniform, prefetch | REX-like, plain | REX-like, prefetch |
//! |---------|----------------|-------------------|-----------------|--------------------|
//! | 1e4     | 19.6           | 17.1              | 12.7            | 12.1               |
//! | 1e5     | 28.6           | 24.5              | 20.9            | 16.3               |
//! | 1e6     | 81.8           | 71.2              | 54.7            | 34.5               |
//! | 1e7     | 159            | 126               | 99              | 56–68              |
//!
//! *Uniform*: `get_or_insert` on a stream of 32-byte patterns, half of them
//! new, half repeats of a uniformly random earlier one (the worst case: every
//! hit confirmation reads a random pattern), into a table sized for the final
//! count; prefetching 16 patterns ahead. *REX-like*: per 4 KiB page, insert
//! the previous version's 128 patterns, then deduplicate the new 128 (40%
//! unchanged, 10% copies of other patterns, 50% new), into a table sized for
//! twice the pages' pattern count; prefetching a page at a time. The uniform
//! worst case cannot go much faster with any table that confirms hits
//! against the pattern bytes: half of its operations read one random
//! pattern, and a branch on the (random) hit/miss outcome serialises them.
//!
//! [`clear`]: DedupTable::clear
//! [`with_capacity`]: DedupTable::with_capacity
//! [`get_or_insert`]: DedupTable::get_or_insert
//! [`get_or_insert_hashed`]: DedupTable::get_or_insert_hashed
//! [`hash`]: DedupTable::hash
//! [`prefetch`]: DedupTable::prefetch

use std::fmt;
use std::mem::MaybeUninit;
use std::sync::Mutex;

/// The two 32-bit hashes of one pattern, as computed by a [`PatternHasher`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PatternHash {
    /// Chooses the first candidate bucket.
    pub h1: u32,
    /// Becomes the entry's tag and, with `h1`, chooses the second bucket.
    pub h2: u32,
}

/// The hash functions of a [`DedupTable`]; injectable so tests can force
/// collisions.
///
/// One call returns both hashes so that a single 64-bit hash can supply them.
/// The two should be independent: `h1` spreads entries over the buckets and
/// `h2` both discriminates entries within a bucket and picks the second
/// bucket. Any function is *correct* (hits are confirmed byte by byte); a poor
/// one is only slow. Closures `Fn(&[u8]) -> PatternHash` implement the trait.
pub trait PatternHasher {
    /// Returns the two hashes of `pattern`.
    fn hash(&self, pattern: &[u8]) -> PatternHash;
}

impl<F: Fn(&[u8]) -> PatternHash> PatternHasher for F {
    #[inline]
    fn hash(&self, pattern: &[u8]) -> PatternHash {
        self(pattern)
    }
}

/// A key for the XXH3 of a [`PatternHasher`]: random, different in every
/// hasher made, never 0 (XXH3's seed 0 is the published, unkeyed hash).
///
/// Unkeyed, XXH3 is easy to collide on purpose: a 16-byte half of the input
/// whose first 8 bytes equal the matching 8 bytes of XXH3's published
/// secret contributes the same product whatever its other 8 bytes, so
/// 2^128 distinct 32-byte patterns share one hash. Memory holding a few MiB
/// of them (data a job took from its users, say) sent every pattern to the
/// stash, and made the push quadratic: 2 MiB took 8 s to push, 8 MiB three
/// minutes (docs/PERFORMANCE.md, *Hostile memory*). The key comes from the
/// standard library's per-process random keys (`RandomState`), so no one
/// outside the process knows it, and it never leaves the process: hashes
/// are never persisted, and hits are confirmed byte for byte whatever the
/// key.
fn random_key() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0x5245_582d_5441_424c_u64) | 1
}

/// The paper's hash: `h1` is CRC-32 (the value `crc32fast::hash` returns),
/// `h2` the low half of a keyed XXH3-64. See the module documentation for
/// its cost against [`Xxh3Hasher`]. CRC-32 is linear and has no key, so
/// patterns made to share one (a linear system anyone can solve) all have
/// the same first bucket; their keyed tags still spread them over second
/// buckets and the stash's map, so such memory costs a push a few times
/// the time, not more: 32 MiB of them 0.36 s against 0.10 s for other
/// patterns (2.3 s before the stash was a map, growing quadratically).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crc32Hasher {
    key: u64,
}

impl Crc32Hasher {
    /// A hasher with a new random key for its XXH3 half.
    pub fn new() -> Self {
        Crc32Hasher { key: random_key() }
    }
}

impl Default for Crc32Hasher {
    fn default() -> Self {
        Self::new()
    }
}

impl PatternHasher for Crc32Hasher {
    #[inline]
    fn hash(&self, pattern: &[u8]) -> PatternHash {
        PatternHash {
            h1: crc32_short(pattern).unwrap_or_else(|| crc32fast::hash(pattern)),
            h2: xxhash_rust::xxh3::xxh3_64_with_seed(pattern, self.key) as u32,
        }
    }
}

/// CRC-32 (IEEE, as `crc32fast::hash`) of a pattern of 16 to 128 bytes in
/// whole 16-byte blocks, or `None` for other lengths or without PCLMULQDQ.
///
/// `crc32fast::hash` is built for long inputs: on a 32-byte pattern its
/// hasher set-up, CPU feature dispatch and generic tail handling cost about
/// 120 instructions (callgrind), several times the folding itself. This is
/// the same algorithm (fold by one 128-bit block, then its 128-to-32-bit
/// Barrett reduction, with its constants), specialised to whole blocks.
#[inline]
fn crc32_short(p: &[u8]) -> Option<u32> {
    #[cfg(target_arch = "x86_64")]
    {
        if p.len().is_multiple_of(16)
            && (16..=128).contains(&p.len())
            && std::arch::is_x86_feature_detected!("pclmulqdq")
        {
            // SAFETY: `crc32_blocks` requires PCLMULQDQ, detected just
            // above (SSE2, its only other need, is part of x86-64), and a
            // length that is a non-zero multiple of 16, checked just above.
            return Some(unsafe { crc32_blocks(p) });
        }
    }
    let _ = p;
    None
}

/// See [`crc32_short`]; constants from `crc32fast` 1.5
/// (`specialized/pclmulqdq.rs`).
///
/// # Safety
///
/// The CPU must support PCLMULQDQ, and `p.len()` must be a non-zero
/// multiple of 16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq", enable = "sse2")]
unsafe fn crc32_blocks(p: &[u8]) -> u32 {
    use std::arch::x86_64 as arch;
    const K3: i64 = 0x1751997d0;
    const K4: i64 = 0x0ccaa009e;
    const K5: i64 = 0x163cd6124;
    const P_X: i64 = 0x1DB710641;
    const U_PRIME: i64 = 0x1F7011641;
    // Intrinsics are safe to call from a function with their target
    // features on recent toolchains; the crate's MSRV (1.88) still wants
    // the block, hence the `allow`.
    #[allow(unused_unsafe)]
    // SAFETY: the caller guarantees the CPU features; every load reads a
    // 16-byte block of `p` (`chunks_exact(16)`), unaligned loads allowed.
    unsafe {
        let load = |b: &[u8]| arch::_mm_loadu_si128(b.as_ptr().cast());
        let mut blocks = p.chunks_exact(16);
        let first = blocks.next().expect("at least one block");
        // The initial CRC (0) enters inverted.
        let mut x = arch::_mm_xor_si128(load(first), arch::_mm_cvtsi32_si128(!0));
        let k3k4 = arch::_mm_set_epi64x(K4, K3);
        for b in blocks {
            let t1 = arch::_mm_clmulepi64_si128(x, k3k4, 0x00);
            let t2 = arch::_mm_clmulepi64_si128(x, k3k4, 0x11);
            x = arch::_mm_xor_si128(arch::_mm_xor_si128(load(b), t1), t2);
        }
        // 128 -> 64 bits, then Barrett reduction to 32, bit-reflected.
        let x = arch::_mm_xor_si128(
            arch::_mm_clmulepi64_si128(x, k3k4, 0x10),
            arch::_mm_srli_si128(x, 8),
        );
        let low32 = arch::_mm_set_epi32(0, 0, 0, !0);
        let x = arch::_mm_xor_si128(
            arch::_mm_clmulepi64_si128(
                arch::_mm_and_si128(x, low32),
                arch::_mm_set_epi64x(0, K5),
                0x00,
            ),
            arch::_mm_srli_si128(x, 4),
        );
        let pu = arch::_mm_set_epi64x(U_PRIME, P_X);
        let t1 = arch::_mm_clmulepi64_si128(arch::_mm_and_si128(x, low32), pu, 0x10);
        let t2 = arch::_mm_clmulepi64_si128(arch::_mm_and_si128(t1, low32), pu, 0x00);
        // Bits 32..64 (`_mm_extract_epi32(_, 1)` without SSE4.1).
        !(arch::_mm_cvtsi128_si32(arch::_mm_srli_si128(arch::_mm_xor_si128(x, t2), 4)) as u32)
    }
}

/// The default hash: the low and high halves of one XXH3-64, keyed with a
/// random key of its own (`random_key`: unkeyed, its collisions can be
/// made at will).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Xxh3Hasher {
    key: u64,
}

impl Xxh3Hasher {
    /// A hasher with a new random key.
    pub fn new() -> Self {
        Xxh3Hasher { key: random_key() }
    }
}

impl Default for Xxh3Hasher {
    fn default() -> Self {
        Self::new()
    }
}

impl PatternHasher for Xxh3Hasher {
    #[inline]
    fn hash(&self, pattern: &[u8]) -> PatternHash {
        let h = xxhash_rust::xxh3::xxh3_64_with_seed(pattern, self.key);
        PatternHash {
            h1: h as u32,
            h2: (h >> 32) as u32,
        }
    }
}

/// The hasher [`DedupTable::with_capacity`] uses.
pub type DefaultHasher = Xxh3Hasher;

/// Slots per bucket.
const WAYS: usize = 4;
/// Evictions tried before an entry goes to the stash.
const MAX_KICKS: usize = 128;
/// Stash length beyond which a loaded table grows.
const STASH_LIMIT: usize = 16;
const MIN_BUCKETS: usize = 4;
/// 2³¹ buckets hold 2³² entries, the whole `u32` pointer space.
const MAX_BUCKETS: usize = 1 << 31;
/// Maximum bucket load: `LOAD_NUM / LOAD_DEN`.
const LOAD_NUM: usize = 3;
const LOAD_DEN: usize = 4;

/// One entry: the tag (never 0) and the pattern pointer.
#[derive(Clone, Copy, Debug)]
struct Slot {
    tag: u32,
    ptr: u32,
}

/// `WAYS` slots; a slot whose tag is 0 is free.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Bucket {
    tag: [u32; WAYS],
    ptr: [u32; WAYS],
}

impl Bucket {
    const EMPTY: Bucket = Bucket {
        tag: [0; WAYS],
        ptr: [0; WAYS],
    };

    /// Stores `s` in a free slot, if any.
    #[inline]
    fn put(&mut self, s: Slot) -> bool {
        for w in 0..WAYS {
            if self.tag[w] == 0 {
                self.tag[w] = s.tag;
                self.ptr[w] = s.ptr;
                return true;
            }
        }
        false
    }

    /// Replaces slot `w` (taken modulo `WAYS`) by `s`; returns the old entry.
    #[inline]
    fn swap(&mut self, w: usize, s: Slot) -> Slot {
        let w = w % WAYS;
        let old = Slot {
            tag: self.tag[w],
            ptr: self.ptr[w],
        };
        self.tag[w] = s.tag;
        self.ptr[w] = s.ptr;
        old
    }
}

#[inline(always)]
fn tag_of(h: PatternHash) -> u32 {
    h.h2 | 1
}

/// `⌊x·n / 2³²⌋`: maps a 32-bit hash onto `0..n` without a division.
#[inline(always)]
fn reduce(x: u32, n: usize) -> usize {
    ((u64::from(x) * n as u64) >> 32) as usize
}

/// The bucket paired with `b` when the pair sums to `s` modulo `n`
/// (`b, s < n`).
#[inline(always)]
fn alt(b: usize, s: usize, n: usize) -> usize {
    if s >= b { s - b } else { s + n - b }
}

/// Pattern equality, with the usual pattern sizes compared as fixed-size
/// arrays so that the comparison is inlined rather than a `bcmp` call
/// (also the Deduplication Unit's test for a surviving pattern).
#[inline(always)]
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    #[inline(always)]
    fn fixed<const N: usize>(a: &[u8], b: &[u8]) -> Option<bool> {
        match (<&[u8; N]>::try_from(a), <&[u8; N]>::try_from(b)) {
            (Ok(x), Ok(y)) => Some(x == y),
            _ => None,
        }
    }
    match b.len() {
        32 => fixed::<32>(a, b),
        16 => fixed::<16>(a, b),
        64 => fixed::<64>(a, b),
        128 => fixed::<128>(a, b),
        _ => None,
    }
    .unwrap_or_else(|| a == b)
}

/// Asks the CPU to bring the cache line holding `p` closer; a no-op off
/// x86-64.
#[inline(always)]
fn prefetch_line<T>(p: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let p: *const T = p;
        // SAFETY: PREFETCHT0 is a hint: it never faults, reads nothing into
        // the program's state and writes nothing, whatever the address; here
        // the address is moreover that of a live reference. SSE is part of
        // the x86-64 baseline, so the instruction always exists. Recent
        // toolchains (1.95 here) declare the intrinsic safe, older ones
        // `unsafe fn`; the block (and the `allow`) keeps the crate building
        // on its declared MSRV, 1.88.
        #[allow(unused_unsafe)]
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p.cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Bucket arrays from this many buckets (32 MiB) are first written on
/// several threads (see [`alloc_buckets`]).
const PARALLEL_FILL: usize = 1 << 20;

/// Allocates `n` free buckets, or `None` if the allocator refuses; the
/// array is first written on up to `threads` threads.
///
/// Its first write is where the kernel provides and zeroes its pages: for
/// the table of a Δ push of 32768 pages (70 MiB) that took 13 to 170 ms on
/// this project's 2-core guest (huge pages, `clear_page_erms`), on the
/// thread that then runs the whole deduplication, while the encoder
/// threads had nothing to do yet.
fn alloc_buckets(n: usize, threads: usize) -> Option<Vec<Bucket>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).ok()?;
    advise_huge_pages(&v);
    let parts = threads.clamp(1, 8).min(n / PARALLEL_FILL).max(1);
    let todo: Mutex<Vec<&mut [MaybeUninit<Bucket>]>> = Mutex::new(
        v.spare_capacity_mut()[..n]
            .chunks_mut(n.div_ceil(parts * 4))
            .collect(),
    );
    // Each thread takes parts until none is left; a thread that cannot
    // start leaves its share to the others, this one included.
    let work = || {
        loop {
            let part = todo.lock().unwrap_or_else(|e| e.into_inner()).pop();
            match part {
                Some(p) => p.fill(MaybeUninit::new(Bucket::EMPTY)),
                None => break,
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..parts {
            let _ = std::thread::Builder::new().spawn_scoped(s, work);
        }
        work();
    });
    // SAFETY: the parts cover the first `n` elements, and every part was
    // taken from `todo` and written by exactly one thread, all of which
    // the scope joined (the queue is empty when this thread's `work`
    // returns, and a part taken is written before its thread ends); `n`
    // is within the capacity reserved.
    unsafe { v.set_len(n) };
    Some(v)
}

/// Asks Linux to back a large bucket array with 2 MiB pages
/// (`MADV_HUGEPAGE`; transparent huge pages are often enabled only on
/// request), before its first touch. Probes land on random buckets, so
/// with 4 KiB pages nearly every probe of a table beyond a few MiB also
/// misses the TLB; with 2 MiB pages the whole table fits it. A hint: any
/// failure is ignored.
fn advise_huge_pages(v: &Vec<Bucket>) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        const PAGE: usize = 4096;
        let bytes = v.capacity() * std::mem::size_of::<Bucket>();
        if bytes < 2 * HUGE {
            return;
        }
        let start = v.as_ptr() as usize;
        let (a, e) = (start.next_multiple_of(PAGE), (start + bytes) / PAGE * PAGE);
        // SAFETY: `[a, e)` lies inside `v`'s allocation (rounded inwards to
        // whole pages), which this function's caller owns and has not
        // handed out. MADV_HUGEPAGE changes no contents and no permissions:
        // it only lets the kernel back the range with huge pages on later
        // faults, so no Rust reference can observe it. The return value is
        // ignored on purpose (an old kernel or THP disabled just means
        // small pages).
        unsafe {
            libc::madvise(a as *mut libc::c_void, e - a, libc::MADV_HUGEPAGE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = v;
}

/// Buckets needed to hold `entries` at the maximum load.
fn buckets_for(entries: usize) -> usize {
    let slots = entries.saturating_mul(LOAD_DEN).div_ceil(LOAD_NUM);
    slots.div_ceil(WAYS).clamp(MIN_BUCKETS, MAX_BUCKETS)
}

/// Bit `w` set: way `w` of bucket `k` carries `tag`.
#[inline(always)]
fn tag_matches(k: &Bucket, tag: u32) -> u32 {
    let mut m = 0;
    for w in 0..WAYS {
        m |= u32::from(k.tag[w] == tag) << w;
    }
    m
}

/// Bit `w` set: way `w` of bucket `k` is free.
#[inline(always)]
fn free_ways(k: &Bucket) -> u32 {
    tag_matches(k, 0)
}

/// The DeD-Table: pattern contents → `u32` pattern pointer, for one batch.
///
/// The table stores pointers and tags only. Every method that may need a
/// stored pattern's bytes takes a *resolver* `resolve(ptr) -> &[u8]`, which
/// must return the bytes of the pattern inserted under `ptr`, for every
/// pointer inserted since the last [`clear`](Self::clear). It is called on
/// tag matches (to confirm a hit) and, when the table grows, once for every
/// entry. It is never called with the `new_ptr` of the insertion in
/// progress, so the caller can append the new pattern to its ΔRPS after
/// [`get_or_insert`](Self::get_or_insert) returns `None`:
///
/// ```
/// use rexctl::l2::dedup_table::DedupTable;
///
/// let page = [[7u8; 32], [9u8; 32], [7u8; 32]];
/// let mut delta: Vec<[u8; 32]> = Vec::new(); // the ΔRPS being built
/// let mut table = DedupTable::with_capacity(1024);
/// let mut pointers = Vec::new();
/// for pattern in &page {
///     let new_ptr = delta.len() as u32;
///     match table.get_or_insert(pattern, new_ptr, |p| &delta[p as usize]) {
///         Some(existing) => pointers.push(existing),
///         None => {
///             delta.push(*pattern);
///             pointers.push(new_ptr);
///         }
///     }
/// }
/// assert_eq!(pointers, [0, 1, 0]);
/// assert_eq!(delta.len(), 2);
/// ```
///
/// The table itself never panics. A resolver that returns other bytes than
/// were inserted can only make it miss duplicates: a returned pointer always
/// resolved, during the call, to bytes equal to the probe.
pub struct DedupTable<H: PatternHasher = DefaultHasher> {
    buckets: Vec<Bucket>,
    /// Entries, in buckets and in the stash.
    len: usize,
    /// Entries in buckets.
    in_buckets: usize,
    /// `in_buckets` bound before growing.
    max_in_buckets: usize,
    /// Entries no bucket could take, by tag: a lookup reads the entries of
    /// its tag only. (A vector searched linearly made every probe after a
    /// first-bucket miss cost the whole stash: memory made of patterns that
    /// share the unkeyed CRC-32 of [`Crc32Hasher`] keeps filling it, and the
    /// push went quadratic.)
    stash: std::collections::HashMap<u32, Vec<u32>>,
    /// Entries in `stash`.
    stashed: usize,
    /// Xorshift state for choosing eviction victims.
    rng: u64,
    hasher: H,
    /// Threads that first write a large bucket array ([`alloc_buckets`]).
    fill_threads: usize,
}

impl DedupTable {
    /// An empty table with the [`DefaultHasher`], sized to hold `n` entries
    /// without growing.
    pub fn with_capacity(n: usize) -> Self {
        Self::with_hasher(n, DefaultHasher::default())
    }
}

impl<H: PatternHasher> DedupTable<H> {
    /// An empty table hashing with `hasher`, sized to hold `n` entries
    /// without growing (10.7 bytes per entry). The bucket array is capped at
    /// 2³¹ buckets, 2³² slots: the pointer space. If the allocation fails, a
    /// smaller table is made, which grows on demand.
    pub fn with_hasher(n: usize, hasher: H) -> Self {
        Self::with_hasher_threads(n, hasher, 1)
    }

    /// [`with_hasher`](Self::with_hasher), writing a large bucket array
    /// first on up to `threads` threads (here and when it grows): the
    /// kernel provides and zeroes its pages then, which takes a push tens
    /// of milliseconds per 100 MiB of table.
    pub fn with_hasher_threads(n: usize, hasher: H, threads: usize) -> Self {
        let mut nb = buckets_for(n);
        let buckets = loop {
            if let Some(b) = alloc_buckets(nb, threads) {
                break b;
            }
            if nb <= MIN_BUCKETS {
                break vec![Bucket::EMPTY; MIN_BUCKETS];
            }
            nb /= 2;
        };
        let mut t = DedupTable {
            buckets,
            len: 0,
            in_buckets: 0,
            max_in_buckets: 0,
            stash: std::collections::HashMap::new(),
            stashed: 0,
            rng: 0x9E37_79B9_7F4A_7C15,
            hasher,
            fill_threads: threads,
        };
        t.set_limits();
        t
    }

    fn set_limits(&mut self) {
        let slots = self.buckets.len().saturating_mul(WAYS);
        self.max_in_buckets = slots / LOAD_DEN * LOAD_NUM + slots % LOAD_DEN * LOAD_NUM / LOAD_DEN;
    }

    #[inline(always)]
    fn bucket_indexes(&self, h: PatternHash) -> [usize; 2] {
        let n = self.buckets.len();
        let b1 = reduce(h.h1, n);
        [b1, alt(b1, reduce(tag_of(h), n), n)]
    }

    /// The hashes of `pattern`, for [`prefetch`](Self::prefetch) and the
    /// `_hashed` methods.
    #[inline]
    pub fn hash(&self, pattern: &[u8]) -> PatternHash {
        self.hasher.hash(pattern)
    }

    /// Starts loading the two buckets a pattern with hashes `h` would probe.
    ///
    /// A hint only: it changes no state. Hashing the next patterns (for
    /// instance a whole page), prefetching them all, then calling
    /// [`get_or_insert_hashed`](Self::get_or_insert_hashed) on each overlaps
    /// their cache misses instead of paying them one after another.
    #[inline]
    pub fn prefetch(&self, h: PatternHash) {
        // Only the first bucket: the second is read only when the first is
        // full (see `get_hashed`), which the load limit keeps uncommon.
        let b1 = reduce(h.h1, self.buckets.len());
        if let Some(bucket) = self.buckets.get(b1) {
            prefetch_line(bucket);
        }
    }

    /// The pointer of a way of `k` whose tag is `tag` and whose pattern
    /// resolves to `pattern`.
    #[inline(always)]
    fn confirm_in<'a, F: FnMut(u32) -> &'a [u8]>(
        k: &Bucket,
        tag: u32,
        pattern: &[u8],
        resolve: &mut F,
    ) -> Option<u32> {
        let mut m = tag_matches(k, tag);
        while m != 0 {
            let ptr = k.ptr[m.trailing_zeros() as usize % WAYS];
            if same(resolve(ptr), pattern) {
                return Some(ptr);
            }
            m &= m - 1;
        }
        None
    }

    #[cold]
    fn stash_find<'a, F: FnMut(u32) -> &'a [u8]>(
        &self,
        tag: u32,
        pattern: &[u8],
        resolve: &mut F,
    ) -> Option<u32> {
        self.stash
            .get(&tag)?
            .iter()
            .copied()
            .find(|&p| same(resolve(p), pattern))
    }

    /// The pointer of the entry whose pattern equals `pattern`, if any.
    #[inline]
    pub fn get<'a, F: FnMut(u32) -> &'a [u8]>(&self, pattern: &[u8], resolve: F) -> Option<u32> {
        self.get_hashed(pattern, self.hasher.hash(pattern), resolve)
    }

    /// [`get`](Self::get) with the hashes already computed by
    /// [`hash`](Self::hash). Hashes that are not `self.hash(pattern)` can
    /// make the lookup miss, never return a wrong pointer.
    #[inline]
    pub fn get_hashed<'a, F: FnMut(u32) -> &'a [u8]>(
        &self,
        pattern: &[u8],
        h: PatternHash,
        mut resolve: F,
    ) -> Option<u32> {
        let tag = tag_of(h);
        let [b1, b2] = self.bucket_indexes(h);
        let k1 = &self.buckets[b1];
        if let Some(p) = Self::confirm_in(k1, tag, pattern, &mut resolve) {
            return Some(p);
        }
        if free_ways(k1) != 0 {
            // A free slot in the first bucket: the pattern is neither in the
            // second bucket nor in the stash (see `get_or_insert_hashed`).
            return None;
        }
        if let Some(p) = Self::confirm_in(&self.buckets[b2], tag, pattern, &mut resolve) {
            return Some(p);
        }
        if self.stashed == 0 {
            None
        } else {
            self.stash_find(tag, pattern, &mut resolve)
        }
    }

    /// Returns the pointer of the entry whose pattern equals `pattern`; if
    /// there is none, records `pattern` under `new_ptr` and returns `None`.
    ///
    /// `resolve` is not called with `new_ptr` during this call, so the
    /// pattern may be appended to the caller's store afterwards. The caller
    /// should use a distinct `new_ptr` for each insertion.
    #[inline]
    pub fn get_or_insert<'a, F: FnMut(u32) -> &'a [u8]>(
        &mut self,
        pattern: &[u8],
        new_ptr: u32,
        resolve: F,
    ) -> Option<u32> {
        let h = self.hasher.hash(pattern);
        self.get_or_insert_hashed(pattern, h, new_ptr, resolve)
    }

    /// [`get_or_insert`](Self::get_or_insert) with the hashes already
    /// computed by [`hash`](Self::hash). Hashes that are not
    /// `self.hash(pattern)` can make the table miss duplicates (and store
    /// the entry where later lookups will not find it), never return a
    /// wrong pointer.
    ///
    /// Usually touches one cache line. A bucket never empties within a
    /// batch (entries are only added, and an eviction replaces the evicted
    /// entry in the same slot), and an entry goes to its second bucket or to
    /// the stash only when its first bucket is full. So while an entry's
    /// first bucket has a free slot, the entry is in that bucket: a probe
    /// whose first bucket has a free slot and no match is a miss without
    /// reading the second bucket or the stash, and inserts there.
    #[inline]
    pub fn get_or_insert_hashed<'a, F: FnMut(u32) -> &'a [u8]>(
        &mut self,
        pattern: &[u8],
        h: PatternHash,
        new_ptr: u32,
        mut resolve: F,
    ) -> Option<u32> {
        let tag = tag_of(h);
        let [b1, b2] = self.bucket_indexes(h);
        let k1 = &self.buckets[b1];
        if let Some(p) = Self::confirm_in(k1, tag, pattern, &mut resolve) {
            return Some(p);
        }
        let (mut b, mut free) = (b1, free_ways(k1));
        if free == 0 {
            let k2 = &self.buckets[b2];
            if let Some(p) = Self::confirm_in(k2, tag, pattern, &mut resolve) {
                return Some(p);
            }
            if self.stashed != 0
                && let Some(p) = self.stash_find(tag, pattern, &mut resolve)
            {
                return Some(p);
            }
            (b, free) = (b2, free_ways(k2));
        }
        self.len += 1;
        let slot = Slot { tag, ptr: new_ptr };
        if free != 0 && self.in_buckets < self.max_in_buckets && self.stashed <= STASH_LIMIT {
            // Fast path: a free slot in b1 (else b2) and no reason to grow.
            let w = free.trailing_zeros() as usize % WAYS;
            let bucket = &mut self.buckets[b];
            bucket.tag[w] = slot.tag;
            bucket.ptr[w] = slot.ptr;
            self.in_buckets += 1;
        } else {
            self.insert_slow(h, slot, &mut resolve);
        }
        None
    }

    /// Grows if the load or the stash calls for it, then places `slot`.
    #[cold]
    #[inline(never)]
    fn insert_slow<'a, F: FnMut(u32) -> &'a [u8]>(
        &mut self,
        h: PatternHash,
        slot: Slot,
        resolve: &mut F,
    ) {
        let slots = self.buckets.len() * WAYS;
        let want_grow = self.in_buckets >= self.max_in_buckets
            || (self.stashed > STASH_LIMIT && self.in_buckets * 2 >= slots);
        if want_grow && self.buckets.len() < MAX_BUCKETS {
            self.grow(resolve);
        }
        let [b1, b2] = self.bucket_indexes(h);
        self.place(slot, b1, b2);
    }

    #[inline]
    fn next_rand(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// Puts `slot` in bucket `b1` or `b2`, evicting entries to their
    /// alternate buckets if both are full; the entry still homeless after
    /// `MAX_KICKS` evictions goes to the stash.
    fn place(&mut self, slot: Slot, b1: usize, b2: usize) {
        if self.buckets[b1].put(slot) || self.buckets[b2].put(slot) {
            self.in_buckets += 1;
            return;
        }
        let n = self.buckets.len();
        let mut slot = slot;
        let mut b = if self.next_rand() & 1 == 0 { b1 } else { b2 };
        for _ in 0..MAX_KICKS {
            // Look one step ahead: evict an entry whose other bucket has a
            // free slot if there is one (the candidates' buckets are read
            // at once, so this costs one memory round trip, not `WAYS`);
            // else a random one, and carry on from its other bucket.
            let here = self.buckets[b];
            let dest = here.tag.map(|t| alt(b, reduce(t, n), n));
            let way = match dest.iter().position(|&d| self.buckets[d].tag.contains(&0)) {
                Some(w) => w,
                None => (self.next_rand() >> 32) as usize % WAYS,
            };
            slot = self.buckets[b].swap(way, slot);
            b = dest[way];
            if self.buckets[b].put(slot) {
                self.in_buckets += 1;
                return;
            }
        }
        self.stash.entry(slot.tag).or_default().push(slot.ptr);
        self.stashed += 1;
    }

    /// Doubles the bucket count and re-inserts every entry, re-hashed from
    /// its bytes. Leaves the table as it is if the allocation fails.
    fn grow<'a, F: FnMut(u32) -> &'a [u8]>(&mut self, resolve: &mut F) {
        let new_n = self.buckets.len().saturating_mul(2).min(MAX_BUCKETS);
        let Some(new_buckets) = alloc_buckets(new_n, self.fill_threads) else {
            return;
        };
        let old = std::mem::replace(&mut self.buckets, new_buckets);
        let old_stash = std::mem::take(&mut self.stash);
        self.stashed = 0;
        self.in_buckets = 0;
        self.set_limits();
        for bucket in &old {
            for w in 0..WAYS {
                if bucket.tag[w] != 0 {
                    self.reinsert(bucket.ptr[w], resolve);
                }
            }
        }
        for ptr in old_stash.into_values().flatten() {
            self.reinsert(ptr, resolve);
        }
    }

    fn reinsert<'a, F: FnMut(u32) -> &'a [u8]>(&mut self, ptr: u32, resolve: &mut F) {
        let h = self.hasher.hash(resolve(ptr));
        let [b1, b2] = self.bucket_indexes(h);
        self.place(
            Slot {
                tag: tag_of(h),
                ptr,
            },
            b1,
            b2,
        );
    }

    /// Removes every entry, keeping the allocation (and any growth) for the
    /// next batch.
    pub fn clear(&mut self) {
        self.buckets.fill(Bucket::EMPTY);
        self.stash.clear();
        self.stashed = 0;
        self.len = 0;
        self.in_buckets = 0;
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table has no entry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of entries the table can hold before it grows.
    pub fn capacity(&self) -> usize {
        self.max_in_buckets
    }

    /// Bytes of memory the table occupies (for reporting).
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.buckets.capacity() * std::mem::size_of::<Bucket>()
            + self.stash.capacity() * std::mem::size_of::<(u32, Vec<u32>)>()
            + self.stashed * std::mem::size_of::<u32>()
    }
}

impl<H: PatternHasher> fmt::Debug for DedupTable<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DedupTable")
            .field("len", &self.len)
            .field("buckets", &self.buckets.len())
            .field("stash", &self.stashed)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// The caller's side of the deduplication: an append-only pattern store
    /// (the ΔRPS) indexed by pointer, checked against a `HashMap` model.
    struct Harness<H: PatternHasher> {
        table: DedupTable<H>,
        store: Vec<Vec<u8>>,
        model: HashMap<Vec<u8>, u32>,
    }

    impl<H: PatternHasher> Harness<H> {
        fn new(capacity: usize, hasher: H) -> Self {
            Harness {
                table: DedupTable::with_hasher(capacity, hasher),
                store: Vec::new(),
                model: HashMap::new(),
            }
        }

        /// Deduplicates one pattern and checks the answer against the model.
        fn feed(&mut self, pattern: &[u8]) -> u32 {
            let new_ptr = u32::try_from(self.store.len()).unwrap();
            let store = &self.store;
            let got = self
                .table
                .get_or_insert(pattern, new_ptr, |p| &store[p as usize]);
            let expected = self.model.get(pattern).copied();
            assert_eq!(got, expected, "pattern {pattern:02x?}");
            match got {
                Some(p) => p,
                None => {
                    self.store.push(pattern.to_vec());
                    self.model.insert(pattern.to_vec(), new_ptr);
                    new_ptr
                }
            }
        }

        /// Checks every stored pattern, and some absent ones, with `get`.
        fn check_all(&self, absent: &[Vec<u8>]) {
            let store = &self.store;
            for (pattern, &ptr) in &self.model {
                assert_eq!(self.table.get(pattern, |p| &store[p as usize]), Some(ptr));
            }
            for pattern in absent {
                assert_eq!(
                    self.table.get(pattern, |p| &store[p as usize]),
                    self.model.get(pattern).copied()
                );
            }
            assert_eq!(self.table.len(), self.model.len());
        }
    }

    /// Every pattern hashes alike: the stash must carry everything.
    fn constant(_: &[u8]) -> PatternHash {
        PatternHash { h1: 7, h2: 7 }
    }

    /// Hashes with only a few bits of entropy: kicks, stash and growth.
    fn weak(p: &[u8]) -> PatternHash {
        let h = crc32fast::hash(p);
        PatternHash {
            h1: h & 0x3,
            h2: (h >> 8) & 0x1,
        }
    }

    /// One bucket choice is always bucket 0: the table degenerates to
    /// one-choice hashing, fills its stash at moderate load and must grow
    /// through it.
    fn skewed(p: &[u8]) -> PatternHash {
        PatternHash {
            h1: 0,
            h2: xxhash_rust::xxh3::xxh3_64(p) as u32,
        }
    }

    /// Deterministic pseudo-random patterns with many repeats and many
    /// near-duplicates (patterns that differ in one byte).
    fn patterns(count: usize, size: usize, seed: u64) -> Vec<Vec<u8>> {
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut out: Vec<Vec<u8>> = Vec::with_capacity(count);
        for _ in 0..count {
            let r = next();
            let p = match r % 4 {
                0 if !out.is_empty() => out[(next() % out.len() as u64) as usize].clone(),
                1 if !out.is_empty() => {
                    let mut p = out[(next() % out.len() as u64) as usize].clone();
                    let i = (next() % size as u64) as usize;
                    p[i] ^= 1 << (next() % 8);
                    p
                }
                _ => (0..size).map(|_| next() as u8).collect(),
            };
            out.push(p);
        }
        out
    }

    #[test]
    fn empty_table_finds_nothing() {
        let t = DedupTable::with_capacity(0);
        assert!(t.is_empty());
        assert_eq!(t.get(&[0u8; 32], |_| unreachable!()), None);
        assert!(t.capacity() >= 1);
    }

    #[test]
    fn every_pattern_size_matches_the_model() {
        for size in [16, 32, 64, 128] {
            let pats = patterns(20_000, size, size as u64);
            let mut h = Harness::new(4096, DefaultHasher::default());
            for p in &pats {
                h.feed(p);
            }
            assert!(h.model.len() < pats.len(), "the input has duplicates");
            h.check_all(&patterns(500, size, 999));
        }
    }

    #[test]
    fn short_crc32_equals_crc32fast() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for len in [16usize, 32, 48, 64, 96, 128] {
            for _ in 0..500 {
                let p: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                assert_eq!(
                    Crc32Hasher::new().hash(&p).h1,
                    crc32fast::hash(&p),
                    "{len} bytes"
                );
            }
            for fill in [0u8, 0xff] {
                let p = vec![fill; len];
                assert_eq!(Crc32Hasher::new().hash(&p).h1, crc32fast::hash(&p));
            }
        }
        // Other lengths take crc32fast itself.
        for len in [0usize, 1, 15, 17, 31, 33, 144, 256] {
            let p = vec![7u8; len];
            assert_eq!(Crc32Hasher::new().hash(&p).h1, crc32fast::hash(&p));
        }
    }

    #[test]
    fn crc32_hasher_matches_the_model() {
        let pats = patterns(20_000, 32, 5);
        let mut h = Harness::new(100, Crc32Hasher::new());
        for p in &pats {
            h.feed(p);
        }
        h.check_all(&patterns(500, 32, 6));
    }

    /// 32-byte patterns that unkeyed XXH3-64 sends to one value: bytes 0..8
    /// and 16..24 are those of XXH3's published secret, which zeroes both
    /// 16-byte products; bytes 8..16 and 24..32 vary freely.
    fn forged_xxh3_collisions(n: u64) -> Vec<Vec<u8>> {
        const SECRET: [u8; 32] = [
            0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21,
            0xad, 0x1c, 0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4,
            0xb7, 0xb3, 0x67, 0x1f,
        ];
        (0..n)
            .map(|i| {
                let mut p = SECRET.to_vec();
                p[8..16].copy_from_slice(&i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
                p[24..32].copy_from_slice(&i.to_le_bytes());
                p
            })
            .collect()
    }

    /// Memory made of patterns that collide under unkeyed XXH3 (the push
    /// of 8 MiB of them took three minutes, every entry in the linearly
    /// searched stash) spreads over the buckets of a table
    /// whose hashers are keyed, and the two hashers of one process differ.
    #[test]
    fn forged_xxh3_collisions_spread_under_the_keyed_hashers() {
        let pats = forged_xxh3_collisions(20_000);
        let unkeyed: std::collections::HashSet<u64> =
            pats.iter().map(|p| xxhash_rust::xxh3::xxh3_64(p)).collect();
        assert_eq!(unkeyed.len(), 1, "the forgery no longer collides");
        let mut h = Harness::new(0, Xxh3Hasher::new());
        for p in &pats {
            h.feed(p);
        }
        h.check_all(&patterns(300, 32, 7));
        assert!(
            h.table.stashed <= STASH_LIMIT,
            "{} entries in the stash",
            h.table.stashed
        );
        // The XXH3 half of the CRC-32 hasher is keyed too.
        let crc = Crc32Hasher::new();
        let tags: std::collections::HashSet<u32> = pats.iter().map(|p| crc.hash(p).h2).collect();
        assert!(tags.len() > pats.len() / 2, "{} distinct tags", tags.len());
        assert_ne!(Xxh3Hasher::new(), Xxh3Hasher::new());
    }

    /// `n` distinct 32-byte patterns with one CRC-32. CRC-32 is affine over
    /// GF(2): `crc(a ^ b) = crc(a) ^ crc(b) ^ crc(0)` for inputs of one
    /// length, so the XOR of any vectors from the kernel of its linear part
    /// (224 dimensions of 256, found by elimination) keeps the CRC of zero.
    fn forged_crc32_collisions(n: u64) -> Vec<Vec<u8>> {
        let zero = crc32fast::hash(&[0u8; 32]);
        let linear = |v: &[u8; 32]| crc32fast::hash(v) ^ zero;
        let xor = |a: &mut [u8; 32], b: &[u8; 32]| a.iter_mut().zip(b).for_each(|(x, y)| *x ^= y);
        // Pivot bit -> (image, input combination).
        let mut basis: HashMap<u32, (u32, [u8; 32])> = HashMap::new();
        let mut kernel: Vec<[u8; 32]> = Vec::new();
        for bit in 0..256 {
            let mut c = [0u8; 32];
            c[bit / 8] = 1 << (bit % 8);
            let mut v = linear(&c);
            while v != 0 {
                let pivot = 31 - v.leading_zeros();
                match basis.get(&pivot) {
                    Some(&(bv, bc)) => {
                        v ^= bv;
                        xor(&mut c, &bc);
                    }
                    None => {
                        basis.insert(pivot, (v, c));
                        break;
                    }
                }
            }
            if v == 0 {
                kernel.push(c);
            }
        }
        assert_eq!(kernel.len(), 224);
        (1..=n)
            .map(|i| {
                let mut p = [0u8; 32];
                for (j, k) in kernel.iter().enumerate().take(64) {
                    if i >> j & 1 == 1 {
                        xor(&mut p, k);
                    }
                }
                p.to_vec()
            })
            .collect()
    }

    /// Patterns made to share one CRC-32 all have the paper's hasher's
    /// first bucket; the table stays exact, and the entries the stash
    /// takes are found by their keyed tags, not by reading every stashed
    /// entry at each probe (which made such a push quadratic: 32 MiB of
    /// them took 2.3 s to push against 0.1 s, 0.36 s now).
    #[test]
    fn forged_crc32_collisions_are_exact_and_stashed_by_tag() {
        let pats = forged_crc32_collisions(30_000);
        let crc: std::collections::HashSet<u32> = pats.iter().map(|p| crc32fast::hash(p)).collect();
        assert_eq!(crc.len(), 1, "the forgery no longer collides");
        let mut h = Harness::new(0, Crc32Hasher::new());
        for p in pats.iter().chain(&pats[..1000]) {
            h.feed(p);
        }
        h.check_all(&patterns(300, 32, 8));
        assert!(
            h.table.stashed > 0,
            "nothing stashed: the test lost its aim"
        );
        let longest = h.table.stash.values().map(Vec::len).max().unwrap_or(0);
        assert!(longest <= 4, "{longest} stashed entries share a tag");
    }

    #[test]
    fn constant_hash_is_still_exact() {
        let pats = patterns(1500, 32, 42);
        let mut h = Harness::new(64, constant);
        for p in &pats {
            h.feed(p);
        }
        h.check_all(&patterns(200, 32, 43));
        // One bucket holds two entries; the stash holds the rest, and the
        // table did not grow in a vain attempt to spread them.
        assert_eq!(h.table.stashed, h.model.len() - WAYS);
        assert_eq!(h.table.buckets.len(), buckets_for(64));
    }

    #[test]
    fn weak_hash_is_still_exact() {
        let pats = patterns(5000, 16, 3);
        let mut h = Harness::new(0, weak);
        for p in &pats {
            h.feed(p);
        }
        h.check_all(&patterns(300, 16, 4));
    }

    #[test]
    fn skewed_hash_grows_through_the_stash() {
        let pats = patterns(20_000, 32, 8);
        let mut h = Harness::new(0, skewed);
        let mut saw_stash = false;
        let mut grew_with_stash = false;
        for p in &pats {
            let (buckets, stash) = (h.table.buckets.len(), h.table.stashed);
            h.feed(p);
            saw_stash |= stash > 0;
            grew_with_stash |= stash > 0 && h.table.buckets.len() > buckets;
        }
        assert!(saw_stash && grew_with_stash);
        h.check_all(&patterns(300, 32, 9));
    }

    #[test]
    fn colliding_patterns_get_distinct_pointers() {
        let mut t = DedupTable::with_hasher(8, constant);
        let store = [[1u8; 32], [2u8; 32], [3u8; 32]];
        for (i, p) in store.iter().enumerate() {
            let got = t.get_or_insert(p, i as u32, |q| &store[q as usize]);
            assert_eq!(got, None);
        }
        for (i, p) in store.iter().enumerate() {
            assert_eq!(t.get(p, |q| &store[q as usize]), Some(i as u32));
        }
    }

    #[test]
    fn a_large_bucket_array_written_on_several_threads_is_all_free() {
        for threads in [1, 2, 3, 64] {
            let n = 2 * PARALLEL_FILL + 3;
            let b = alloc_buckets(n, threads).unwrap();
            assert_eq!(b.len(), n);
            assert!(
                b.iter().all(|k| k.tag == [0; WAYS] && k.ptr == [0; WAYS]),
                "threads = {threads}"
            );
        }
    }

    #[test]
    fn grows_past_initial_capacity() {
        let pats = patterns(200_000, 32, 11);
        let mut h = Harness::new(0, DefaultHasher::default());
        let initial = h.table.capacity();
        let initial_memory = h.table.memory_bytes();
        for p in &pats {
            h.feed(p);
        }
        assert!(h.table.capacity() >= h.model.len());
        assert!(h.table.capacity() > initial);
        assert!(h.table.memory_bytes() > initial_memory);
        h.check_all(&patterns(1000, 32, 12));
    }

    #[test]
    fn presized_table_does_not_grow() {
        let n = 50_000;
        let mut t = DedupTable::with_capacity(n);
        let memory = t.memory_bytes();
        assert!(t.capacity() >= n);
        let store: Vec<[u8; 32]> = (0..n as u32)
            .map(|i| {
                let mut p = [0u8; 32];
                p[..4].copy_from_slice(&i.to_le_bytes());
                p
            })
            .collect();
        for (i, p) in store.iter().enumerate() {
            assert_eq!(t.get_or_insert(p, i as u32, |q| &store[q as usize]), None);
        }
        assert_eq!(t.len(), n);
        assert_eq!(t.memory_bytes(), memory);
        // 8 bytes per slot at a load of at most 3/4, plus rounding.
        assert!(memory < n * 11 + 1024, "{memory} bytes for {n} entries");
    }

    #[test]
    fn clear_reuses_the_allocation() {
        let mut h = Harness::new(0, DefaultHasher::default());
        for p in &patterns(30_000, 32, 21) {
            h.feed(p);
        }
        let memory = h.table.memory_bytes();
        let old: Vec<Vec<u8>> = h.model.keys().cloned().collect();
        h.table.clear();
        assert!(h.table.is_empty());
        assert_eq!(h.table.len(), 0);
        assert_eq!(h.table.memory_bytes(), memory);
        // The old patterns are gone, even though the store still has them.
        let store = &h.store;
        for p in &old {
            assert_eq!(h.table.get(p, |q| &store[q as usize]), None);
        }
        // A new batch gets new pointers, starting past the old store.
        h.model.clear();
        for p in &patterns(20_000, 32, 22) {
            h.feed(p);
        }
        assert_eq!(h.table.memory_bytes(), memory);
        h.check_all(&old);
    }

    #[test]
    fn clear_after_stash_use() {
        let mut h = Harness::new(0, constant);
        for p in &patterns(100, 32, 1) {
            h.feed(p);
        }
        assert!(h.table.stashed != 0);
        h.table.clear();
        h.model.clear();
        assert!(h.table.stashed == 0);
        for p in &patterns(100, 32, 2) {
            h.feed(p);
        }
        h.check_all(&[]);
    }

    #[test]
    fn extreme_pointers_are_storable() {
        let a = [0xAAu8; 32];
        let b = [0xBBu8; 32];
        let resolve = |p: u32| -> &[u8] {
            match p {
                0 => &a,
                u32::MAX => &b,
                _ => unreachable!(),
            }
        };
        let mut t = DedupTable::with_capacity(4);
        assert_eq!(t.get_or_insert(&a, 0, resolve), None);
        assert_eq!(t.get_or_insert(&b, u32::MAX, resolve), None);
        assert_eq!(t.get(&a, resolve), Some(0));
        assert_eq!(t.get(&b, resolve), Some(u32::MAX));
    }

    #[test]
    fn lengths_are_part_of_the_pattern() {
        let long = [5u8; 32];
        let short = [5u8; 16];
        let store: [&[u8]; 2] = [&long, &short];
        let mut t = DedupTable::with_hasher(4, constant);
        assert_eq!(t.get_or_insert(&long, 0, |p| store[p as usize]), None);
        assert_eq!(t.get_or_insert(&short, 1, |p| store[p as usize]), None);
        assert_eq!(t.get(&short, |p| store[p as usize]), Some(1));
        // A length outside the usual sizes takes the generic comparison.
        let odd = [5u8; 31];
        assert_eq!(t.get(&odd, |p| store[p as usize]), None);
    }

    #[test]
    fn prefetched_pipeline_matches_the_model() {
        let pats = patterns(20_000, 32, 77);
        let mut t = DedupTable::with_capacity(1000);
        let mut store: Vec<&[u8]> = Vec::new();
        let mut model: HashMap<&[u8], u32> = HashMap::new();
        for page in pats.chunks(128) {
            let hashes: Vec<PatternHash> = page.iter().map(|p| t.hash(p)).collect();
            for &h in &hashes {
                t.prefetch(h);
            }
            for (p, &h) in page.iter().zip(&hashes) {
                let new_ptr = store.len() as u32;
                let got = t.get_or_insert_hashed(p, h, new_ptr, |q| store[q as usize]);
                assert_eq!(got, model.get(p.as_slice()).copied());
                if got.is_none() {
                    store.push(p);
                    model.insert(p, new_ptr);
                }
                assert_eq!(
                    t.get_hashed(p, h, |q| store[q as usize]),
                    model.get(p.as_slice()).copied()
                );
            }
        }
    }

    #[test]
    fn bucket_pairs_are_symmetric() {
        for n in [4usize, 5, 7, 1000, 1 << 20, 3 << 20, MAX_BUCKETS] {
            for (h1, h2) in [
                (0, 0),
                (u32::MAX, u32::MAX),
                (1, 2),
                (0xDEAD_BEEF, 0x1234_5678),
            ] {
                let h = PatternHash { h1, h2 };
                let b1 = reduce(h1, n);
                let s = reduce(tag_of(h), n);
                let b2 = alt(b1, s, n);
                assert!(b1 < n && b2 < n);
                assert_eq!(alt(b2, s, n), b1);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Arbitrary sequences over a small alphabet of patterns (so that
        /// duplicates are frequent), any size, with a good, a weak, a skewed
        /// and a constant hasher: the table always answers like a `HashMap`.
        #[test]
        fn behaves_like_a_hashmap(
            size in prop::sample::select(vec![16usize, 32, 64, 128]),
            alphabet in prop::collection::vec(any::<u64>(), 1..200),
            picks in prop::collection::vec(any::<prop::sample::Index>(), 1..600),
            capacity in 0usize..300,
            hasher in 0u8..4,
        ) {
            let pats: Vec<Vec<u8>> = alphabet
                .iter()
                .map(|&seed| {
                    let mut p = vec![0u8; size];
                    p[..8].copy_from_slice(&seed.to_le_bytes());
                    p[size - 1] = seed as u8;
                    p
                })
                .collect();
            let seq = picks.iter().map(|i| &pats[i.index(pats.len())]);
            match hasher {
                0 => {
                    let mut h = Harness::new(capacity, DefaultHasher::default());
                    seq.for_each(|p| { h.feed(p); });
                    h.check_all(&pats);
                }
                1 => {
                    let mut h = Harness::new(capacity, weak);
                    seq.for_each(|p| { h.feed(p); });
                    h.check_all(&pats);
                }
                2 => {
                    let mut h = Harness::new(capacity, skewed);
                    seq.for_each(|p| { h.feed(p); });
                    h.check_all(&pats);
                }
                _ => {
                    let mut h = Harness::new(capacity, constant);
                    seq.for_each(|p| { h.feed(p); });
                    h.check_all(&pats);
                }
            }
        }
    }
}
