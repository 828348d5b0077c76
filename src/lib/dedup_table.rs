//! DeD-Table (draft; docs to be finished after measurement).

use std::fmt;

/// The two 32-bit hashes of one pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PatternHash {
    /// First hash: chooses the first candidate bucket.
    pub h1: u32,
    /// Second hash: chooses the second candidate bucket.
    pub h2: u32,
}

/// Hash functions used by the table; injectable for tests.
pub trait PatternHasher {
    /// Returns the two hashes of `pattern`.
    fn hash(&self, pattern: &[u8]) -> PatternHash;
}

/// CRC-32 (paper) + XXH3.
#[derive(Clone, Copy, Debug, Default)]
pub struct Crc32Hasher;

impl PatternHasher for Crc32Hasher {
    #[inline]
    fn hash(&self, pattern: &[u8]) -> PatternHash {
        PatternHash {
            h1: crc32fast::hash(pattern),
            h2: xxhash_rust::xxh3::xxh3_64(pattern) as u32,
        }
    }
}

/// Both halves of one XXH3-64.
#[derive(Clone, Copy, Debug, Default)]
pub struct Xxh3Hasher;

impl PatternHasher for Xxh3Hasher {
    #[inline]
    fn hash(&self, pattern: &[u8]) -> PatternHash {
        let h = xxhash_rust::xxh3::xxh3_64(pattern);
        PatternHash {
            h1: h as u32,
            h2: (h >> 32) as u32,
        }
    }
}

/// Default hasher.
pub type DefaultHasher = Crc32Hasher;

const WAYS: usize = 2;
const MAX_KICKS: usize = 128;
const STASH_LIMIT: usize = 16;
const MIN_BUCKETS: usize = 4;
const MAX_BUCKETS: usize = 1 << 31;
const LOAD_NUM: usize = 7;
const LOAD_DEN: usize = 8;

#[derive(Clone, Copy)]
struct Slot {
    tag: u32,
    ptr: u32,
}

#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct Bucket {
    tag: [u32; WAYS],
    ptr: [u32; WAYS],
}

impl Bucket {
    const EMPTY: Bucket = Bucket {
        tag: [0; WAYS],
        ptr: [0; WAYS],
    };

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
    (h.h1 ^ h.h2) | 1
}

#[inline(always)]
fn same(a: &[u8], b: &[u8]) -> bool {
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

#[inline(always)]
fn prefetch_addr<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        #[allow(unused_unsafe)]
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p.cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

fn alloc_buckets(n: usize) -> Option<Vec<Bucket>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).ok()?;
    v.resize(n, Bucket::EMPTY);
    Some(v)
}

fn buckets_for(entries: usize) -> usize {
    let slots = entries.saturating_mul(LOAD_DEN) / LOAD_NUM + 1;
    slots
        .div_ceil(WAYS)
        .checked_next_power_of_two()
        .unwrap_or(MAX_BUCKETS)
        .clamp(MIN_BUCKETS, MAX_BUCKETS)
}

/// Result of probing the two candidate buckets.
struct Probe {
    b: [usize; 2],
    ptr: [u32; 4],
    matches: u32,
    empties: u32,
}

/// The DeD-Table.
pub struct DedupTable<H: PatternHasher = DefaultHasher> {
    buckets: Vec<Bucket>,
    mask: usize,
    len: usize,
    in_buckets: usize,
    max_in_buckets: usize,
    stash: Vec<Slot>,
    rng: u64,
    hasher: H,
}

impl DedupTable {
    /// Table for about `n` entries.
    pub fn with_capacity(n: usize) -> Self {
        Self::with_hasher(n, DefaultHasher::default())
    }
}

impl<H: PatternHasher> DedupTable<H> {
    /// Table for about `n` entries with `hasher`.
    pub fn with_hasher(n: usize, hasher: H) -> Self {
        let mut nb = buckets_for(n);
        let buckets = loop {
            if let Some(b) = alloc_buckets(nb) {
                break b;
            }
            if nb <= MIN_BUCKETS {
                break vec![Bucket::EMPTY; MIN_BUCKETS];
            }
            nb /= 2;
        };
        let mut t = DedupTable {
            mask: 0,
            max_in_buckets: 0,
            buckets,
            len: 0,
            in_buckets: 0,
            stash: Vec::new(),
            rng: 0x9E37_79B9_7F4A_7C15,
            hasher,
        };
        t.set_geometry();
        t
    }

    fn set_geometry(&mut self) {
        let n = self.buckets.len();
        self.mask = n - 1;
        self.max_in_buckets = n * WAYS / LOAD_DEN * LOAD_NUM;
    }

    #[inline(always)]
    fn bucket_indexes(&self, h: PatternHash) -> [usize; 2] {
        [
            (h.h1 >> 1) as usize & self.mask,
            (h.h2 >> 1) as usize & self.mask,
        ]
    }

    /// Hashes `pattern` with this table's hasher.
    #[inline]
    pub fn hash(&self, pattern: &[u8]) -> PatternHash {
        self.hasher.hash(pattern)
    }

    /// Prefetch the two candidate buckets.
    #[inline]
    pub fn prefetch(&self, h: PatternHash) {
        let [b1, b2] = self.bucket_indexes(h);
        let base = self.buckets.as_ptr();
        prefetch_addr(base.wrapping_add(b1));
        prefetch_addr(base.wrapping_add(b2));
    }

    #[doc(hidden)]
    pub fn prefetch_touch(&self, h: PatternHash) {
        let [b1, b2] = self.bucket_indexes(h);
        std::hint::black_box(self.buckets[b1].tag[0]);
        std::hint::black_box(self.buckets[b2].tag[0]);
    }

    /// Stage 2 prefetch.
    #[inline]
    pub fn prefetch_matches<'a, F: FnMut(u32) -> &'a [u8]>(&self, h: PatternHash, mut resolve: F) {
        let p = self.probe(h);
        let mut m = p.matches;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            prefetch_addr(resolve(p.ptr[i & 3]).as_ptr());
        }
    }

    #[inline(always)]
    fn probe(&self, h: PatternHash) -> Probe {
        let tag = tag_of(h);
        let b = self.bucket_indexes(h);
        let k1 = &self.buckets[b[0]];
        let k2 = &self.buckets[b[1]];
        let tags = [k1.tag[0], k1.tag[1], k2.tag[0], k2.tag[1]];
        let mut matches = 0;
        let mut empties = 0;
        for (i, &t) in tags.iter().enumerate() {
            matches |= u32::from(t == tag) << i;
            empties |= u32::from(t == 0) << i;
        }
        Probe {
            b,
            ptr: [k1.ptr[0], k1.ptr[1], k2.ptr[0], k2.ptr[1]],
            matches,
            empties,
        }
    }

    #[inline(always)]
    fn confirm<'a, F: FnMut(u32) -> &'a [u8]>(
        &self,
        p: &Probe,
        tag: u32,
        pattern: &[u8],
        resolve: &mut F,
    ) -> Option<u32> {
        let mut m = p.matches;
        while m != 0 {
            let ptr = p.ptr[m.trailing_zeros() as usize & 3];
            if same(resolve(ptr), pattern) {
                return Some(ptr);
            }
            m &= m - 1;
        }
        if self.stash.is_empty() {
            return None;
        }
        self.stash_find(tag, pattern, resolve)
    }

    /// Looks `pattern` up.
    #[inline]
    pub fn get<'a, F: FnMut(u32) -> &'a [u8]>(&self, pattern: &[u8], resolve: F) -> Option<u32> {
        self.get_hashed(pattern, self.hasher.hash(pattern), resolve)
    }

    /// Looks `pattern` up given its hash.
    #[inline]
    pub fn get_hashed<'a, F: FnMut(u32) -> &'a [u8]>(
        &self,
        pattern: &[u8],
        h: PatternHash,
        mut resolve: F,
    ) -> Option<u32> {
        let p = self.probe(h);
        self.confirm(&p, tag_of(h), pattern, &mut resolve)
    }

    #[cold]
    fn stash_find<'a, F: FnMut(u32) -> &'a [u8]>(
        &self,
        tag: u32,
        pattern: &[u8],
        resolve: &mut F,
    ) -> Option<u32> {
        self.stash
            .iter()
            .find(|s| s.tag == tag && same(resolve(s.ptr), pattern))
            .map(|s| s.ptr)
    }

    /// Get or insert.
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

    /// Get or insert, hashed.
    #[inline]
    pub fn get_or_insert_hashed<'a, F: FnMut(u32) -> &'a [u8]>(
        &mut self,
        pattern: &[u8],
        h: PatternHash,
        new_ptr: u32,
        mut resolve: F,
    ) -> Option<u32> {
        let tag = tag_of(h);
        let p = self.probe(h);
        if let Some(found) = self.confirm(&p, tag, pattern, &mut resolve) {
            return Some(found);
        }
        self.len += 1;
        let slot = Slot { tag, ptr: new_ptr };
        if p.empties != 0 && self.in_buckets < self.max_in_buckets && self.stash.len() <= STASH_LIMIT {
            let i = p.empties.trailing_zeros() as usize & 3;
            let b = &mut self.buckets[p.b[i >> 1]];
            b.tag[i & 1] = tag;
            b.ptr[i & 1] = new_ptr;
            self.in_buckets += 1;
        } else {
            self.insert_slow(h, slot, &mut resolve);
        }
        None
    }

    #[doc(hidden)]
    pub fn bench_insert_unchecked<'a, F: FnMut(u32) -> &'a [u8]>(&mut self, h: PatternHash, ptr: u32, mut resolve: F) {
        self.len += 1;
        self.insert_slow(h, Slot { tag: tag_of(h), ptr }, &mut resolve)
    }

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
            || (self.stash.len() > STASH_LIMIT && self.in_buckets * 2 >= slots);
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

    /// Puts `slot` in one of its buckets, kicking if needed; the entry left
    /// homeless after MAX_KICKS goes to the stash.
    fn place(&mut self, slot: Slot, b1: usize, b2: usize) {
        if self.buckets[b1].put(slot) || self.buckets[b2].put(slot) {
            self.in_buckets += 1;
            return;
        }
        let mut slot = slot;
        let mut b = if self.next_rand() & 1 == 0 { b1 } else { b2 };
        for _ in 0..MAX_KICKS {
            let way = (self.next_rand() >> 17) as usize % WAYS;
            slot = self.buckets[b].swap(way, slot);
            b = (b ^ (slot.tag >> 1) as usize) & self.mask;
            if self.buckets[b].put(slot) {
                self.in_buckets += 1;
                return;
            }
        }
        self.stash.push(slot);
    }

    fn grow<'a, F: FnMut(u32) -> &'a [u8]>(&mut self, resolve: &mut F) {
        let Some(new_n) = self.buckets.len().checked_mul(2) else {
            return;
        };
        let Some(new_buckets) = alloc_buckets(new_n) else {
            return;
        };
        let old = std::mem::replace(&mut self.buckets, new_buckets);
        let old_stash = std::mem::take(&mut self.stash);
        self.in_buckets = 0;
        self.set_geometry();
        for b in &old {
            for w in 0..WAYS {
                if b.tag[w] != 0 {
                    self.reinsert(b.ptr[w], resolve);
                }
            }
        }
        for s in old_stash {
            self.reinsert(s.ptr, resolve);
        }
    }

    fn reinsert<'a, F: FnMut(u32) -> &'a [u8]>(&mut self, ptr: u32, resolve: &mut F) {
        let h = self.hasher.hash(resolve(ptr));
        let [b1, b2] = self.bucket_indexes(h);
        self.place(Slot { tag: tag_of(h), ptr }, b1, b2);
    }

    /// Empties the table, keeping its allocation.
    pub fn clear(&mut self) {
        self.buckets.fill(Bucket::EMPTY);
        self.stash.clear();
        self.len = 0;
        self.in_buckets = 0;
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Entries the table holds before it next grows.
    pub fn capacity(&self) -> usize {
        self.max_in_buckets
    }

    /// Entries in the stash.
    pub fn stash_len(&self) -> usize {
        self.stash.len()
    }

    /// Heap + inline bytes.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.buckets.capacity() * std::mem::size_of::<Bucket>()
            + self.stash.capacity() * std::mem::size_of::<Slot>()
    }
}

impl<H: PatternHasher> fmt::Debug for DedupTable<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DedupTable")
            .field("len", &self.len)
            .field("buckets", &self.buckets.len())
            .field("stash", &self.stash.len())
            .finish()
    }
}
