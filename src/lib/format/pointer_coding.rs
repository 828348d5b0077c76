//! Pointer coding: the Pointer File chunk transform of container version 2
//! (docs/FORMAT.md §3.2.6).
//!
//! A Pointer File is `alpha` 4-byte pointers per dirty page, yet most of
//! them carry almost no information: a pattern met for the first time gets
//! the next pointer of the pattern space (new patterns are appended in
//! order), a pattern that survived from the page's previous version keeps
//! that version's pointer, which continues the run of consecutive pointers
//! the previous version was written as, and zero patterns all share one
//! pointer. Stored as plain `u32`s, a page costs `alpha * 4` bytes whatever
//! it holds, which caps the compression ratio of a changed page at 8.
//!
//! The coder predicts each pointer three ways and writes which prediction
//! held, as runs, falling back to a literal (a signed distance from the run
//! prediction) when none did:
//!
//! * **RUN**: `run`, the pointer after the previous position's (a previous
//!   version written in order, or any run of consecutive pointers); a NEW or
//!   ZERO position keeps its place in the run, so the pointers after a
//!   changed pattern continue the previous version's;
//! * **NEW**: `next_new`, the pattern space's next new pointer;
//! * **ZERO**: `zero`, the chunk's zero-pattern pointer (the writer's hint).
//!
//! A page whose contents are unchanged, new, or zero thus costs one or two
//! token bytes before the entropy stage (zstd), which squeezes the repeats
//! between pages further.
//!
//! The second coding (`prev`, L2 format version 4) adds a fourth
//! prediction: **PREV**, *the page's previous version's pointer at this
//! position*. A pattern kept from the previous version keeps that
//! version's pointer, which RUN predicts only when the previous version's
//! pointers ran on in order; after a few generations they mostly do not
//! (each kept pattern then cost a literal of 3-4 bytes). The chunk cannot
//! know that pointer, so a PREV position decodes to [`HOLE`] and the chain
//! fills it from the page's previous version (`l2::chain`). The stream carries its starting state, so every
//! chunk decodes on its own (a `--pages` restore decodes only the chunks it
//! touches). Decoding is total: any byte string either decodes to exactly
//! the requested number of pointers or is an error, never a panic, and
//! allocates nothing. It takes the common tokens (short runs, short
//! literals) in a fast loop that leaves anything else, errors included, to
//! the token-by-token decoder; a restore of a long chain spends a fifth of
//! its time here otherwise (docs/PERFORMANCE.md, "Pointer File decoding").

/// Token kinds, in the top two bits of a token byte.
const RUN: u8 = 0;
const NEW: u8 = 1;
const ZERO: u8 = 2;
const LIT: u8 = 3;
/// Low six bits of a run token: `count - 1` when below this; this value
/// means a LEB128 `count - 64` follows.
const LONG: u8 = 63;
/// Bytes of the stream header: `next_new`, `zero` and `run`, each a u32.
pub const STATE_LEN: usize = 12;
/// What a PREV position decodes to (coding with `prev` only): a pointer no
/// pattern has there, since writers of that coding end the pattern space
/// below it.
pub const HOLE: u32 = u32::MAX;
/// The PREV kind, in the encoder: a LIT token byte with low bits
/// `1..=62` (the count) or 63 (a LEB128 `count - 63` follows).
const PREV: u8 = 4;

/// The coder's state: what each prediction would give next.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct State {
    /// The pattern space's next new pointer.
    pub next_new: u32,
    /// The zero-pattern pointer (a hint: any value is correct).
    pub zero: u32,
    /// The run prediction: the pointer after the previous position's.
    pub run: u32,
}

impl State {
    /// The state after `ptrs` (little-endian u32s), as the coder (with
    /// `prev` or without) leaves it: the writer computes a chunk's starting
    /// state from the chunk before with this cheap scan, so chunks can be
    /// coded in parallel.
    pub fn advance(mut self, ptrs: &[u8], prev: bool) -> State {
        for p in ptrs.chunks_exact(4) {
            let p = u32::from_le_bytes(p.try_into().expect("4 bytes"));
            // As the coder: a NEW, RUN, ZERO or PREV position advances the
            // run prediction by one, a literal restarts it after itself.
            if prev && p == HOLE {
                self.run = self.run.wrapping_add(1);
            } else if p == self.next_new {
                self.next_new = self.next_new.wrapping_add(1);
                self.run = self.run.wrapping_add(1);
            } else if p == self.run || p == self.zero {
                self.run = self.run.wrapping_add(1);
            } else {
                self.run = p.wrapping_add(1);
            }
        }
        self
    }
}

/// Appends `v` as LEB128: 7 bits per byte, least significant first, the
/// high bit set on every byte but the last (the shortest encoding).
pub(crate) fn push_leb(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn push_run(out: &mut Vec<u8>, kind: u8, n: u64) {
    if n == 0 {
        return;
    }
    if kind == PREV {
        if n < u64::from(LONG) {
            out.push(LIT << 6 | n as u8);
        } else {
            out.push(LIT << 6 | LONG);
            push_leb(out, n - u64::from(LONG));
        }
        return;
    }
    if n <= u64::from(LONG) {
        out.push(kind << 6 | (n - 1) as u8);
    } else {
        out.push(kind << 6 | LONG);
        push_leb(out, n - 64);
    }
}

/// Codes `ptrs` (little-endian u32s) from `state`, appending to `out`;
/// with `prev`, each [`HOLE`] as PREV.
pub fn encode(ptrs: &[u8], state: State, out: &mut Vec<u8>, prev: bool) {
    out.extend_from_slice(&state.next_new.to_le_bytes());
    out.extend_from_slice(&state.zero.to_le_bytes());
    out.extend_from_slice(&state.run.to_le_bytes());
    let State {
        mut next_new,
        zero,
        mut run,
    } = state;
    let (mut kind, mut n) = (RUN, 0u64);
    for p in ptrs.chunks_exact(4) {
        let p = u32::from_le_bytes(p.try_into().expect("4 bytes"));
        // NEW first: a new pointer must advance `next_new`, whatever else
        // it also equals.
        let k = if prev && p == HOLE {
            PREV
        } else if p == next_new {
            next_new = next_new.wrapping_add(1);
            NEW
        } else if p == run {
            RUN
        } else if p == zero {
            ZERO
        } else {
            LIT
        };
        if k != kind || k == LIT {
            push_run(out, kind, n);
            (kind, n) = (k, 0);
        }
        if k == LIT {
            out.push(LIT << 6);
            let d = i64::from(p) - i64::from(run);
            push_leb(out, ((d << 1) ^ (d >> 63)) as u64);
            run = p.wrapping_add(1);
        } else {
            // A new or zero pattern takes its position in the run: the
            // pointers after it continue the previous version's.
            n += 1;
            run = run.wrapping_add(1);
        }
    }
    if kind != LIT {
        push_run(out, kind, n);
    }
}

/// Reads a LEB128 value of at most 64 bits at `*at`.
pub(crate) fn read_leb(b: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let Some(&byte) = b.get(*at) else {
            return Err(format!("the stream ends inside a number at byte {}", *at));
        };
        *at += 1;
        let bits = u64::from(byte & 0x7f);
        if shift == 63 && bits > 1 {
            return Err(format!("a number overflows 64 bits at byte {}", *at - 1));
        }
        v |= bits << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(format!("a number overflows 64 bits at byte {}", *at - 1))
}

/// Decodes a coded stream into `out`, which it must fill exactly (a
/// multiple of 4 bytes); with `prev`, PREV positions as [`HOLE`], and any
/// other pointer equal to it is an error. The error says what is wrong and
/// at which byte of the stream.
pub fn decode(coded: &[u8], out: &mut [u8], prev: bool) -> Result<(), String> {
    decode_with(coded, out, prev, true)
}

/// Where a decode stands: the stream byte, the pointers written, and the
/// predictions that change as it goes.
struct Cursor {
    at: usize,
    done: usize,
    next_new: u32,
    run: u32,
}

/// [`decode`], with or without its fast path ([`fast_tokens`]); the tests
/// compare the two on any stream.
fn decode_with(coded: &[u8], out: &mut [u8], prev: bool, fast: bool) -> Result<(), String> {
    if coded.len() < STATE_LEN {
        return Err(format!(
            "the stream is {} bytes, shorter than its {STATE_LEN}-byte state",
            coded.len()
        ));
    }
    let le = |o: usize| u32::from_le_bytes(coded[o..o + 4].try_into().expect("4 bytes"));
    let zero = le(4);
    let mut c = Cursor {
        at: STATE_LEN,
        done: 0,
        next_new: le(0),
        run: le(8),
    };
    let total = out.len() / 4;
    while c.at < coded.len() {
        if fast {
            fast_tokens(coded, out, prev, zero, &mut c);
            if c.at >= coded.len() {
                break;
            }
        }
        token(coded, out, prev, zero, &mut c)?;
    }
    if c.done != total {
        return Err(format!(
            "the stream decodes to {} pointers, the chunk holds {total}",
            c.done
        ));
    }
    Ok(())
}

/// Decodes the common tokens at `c` (runs of at most 8 pointers, PREV runs
/// of at most 8, literals of at most 8 bytes) until one is not, or fewer
/// than 8 pointers or 9 stream bytes are left. It writes 8 pointers
/// whatever the run's length (the next tokens of a stream that decodes
/// overwrite the extra ones; after an error `out` holds nothing promised),
/// picks the run's first pointer by table rather than by branch, and reads
/// a literal's number in one 8-byte load: Pointer Files are mostly runs of
/// one to four pointers in no predictable order of kinds, which the
/// token-by-token decoder pays in mispredicted branches. It never fails: a
/// token it cannot take, valid or not, is left to [`token`], which gives
/// the same pointers and names what is wrong.
#[inline(always)]
fn fast_tokens(coded: &[u8], out: &mut [u8], prev: bool, zero: u32, c: &mut Cursor) {
    let total = out.len() / 4;
    while c.done + 8 <= total && c.at + 9 <= coded.len() {
        let tok = coded[c.at];
        let kind = tok >> 6;
        let low = u32::from(tok & 0x3f);
        let (first, step, n) = if kind != LIT {
            if low >= 8 {
                return;
            }
            let n = low + 1;
            let first = [c.run, c.next_new, zero, 0][usize::from(kind)];
            let step = u32::from(kind != ZERO);
            let next_new = u64::from(c.next_new) + u64::from(n * u32::from(kind == NEW));
            if next_new > u64::from(u32::MAX)
                || (prev && u64::from(first) + u64::from(step * (n - 1)) >= u64::from(HOLE))
            {
                return;
            }
            c.next_new = next_new as u32;
            c.at += 1;
            (first, step, n)
        } else if low != 0 {
            // A PREV run (`prev` only; else the token is an error).
            if !prev || low > 8 {
                return;
            }
            c.at += 1;
            (HOLE, 0, low)
        } else {
            // A literal: LEB128 in at most 8 bytes (the stop byte is the
            // first without its high bit).
            let x = u64::from_le_bytes(coded[c.at + 1..c.at + 9].try_into().expect("8 bytes"));
            let stop = !x & 0x8080_8080_8080_8080;
            if stop == 0 {
                return;
            }
            let len = stop.trailing_zeros() / 8 + 1;
            let x = x & (u64::MAX >> (64 - 8 * len));
            let mut z = 0;
            for i in 0..8 {
                z |= (x >> i) & (0x7f << (7 * i));
            }
            let d = ((z >> 1) as i64) ^ -((z & 1) as i64);
            // `z` < 2^56: no overflow.
            let p = i64::from(c.run) + d;
            let Ok(p) = u32::try_from(p) else {
                return;
            };
            if prev && p == HOLE {
                return;
            }
            c.at += 1 + len as usize;
            // The run restarts after the literal: `run + 1` below is `p + 1`.
            c.run = p;
            (p, 0, 1)
        };
        // `done + 8 <= total`: 8 slots, of which the run's `n` are kept.
        let dst = &mut out[c.done * 4..c.done * 4 + 32];
        for (i, slot) in dst.chunks_exact_mut(4).enumerate() {
            slot.copy_from_slice(
                &first
                    .wrapping_add(step.wrapping_mul(i as u32))
                    .to_le_bytes(),
            );
        }
        c.run = c.run.wrapping_add(n);
        c.done += n as usize;
    }
}

/// Decodes the one token at `c`, or says why it cannot.
fn token(
    coded: &[u8],
    out: &mut [u8],
    prev: bool,
    zero: u32,
    c: &mut Cursor,
) -> Result<(), String> {
    let total = out.len() / 4;
    let done = c.done;
    let tok = coded[c.at];
    let tok_at = c.at;
    c.at += 1;
    let kind = tok >> 6;
    if kind == LIT && tok & 0x3f != 0 && prev {
        let n = match tok & 0x3f {
            LONG => read_leb(coded, &mut c.at)?.checked_add(u64::from(LONG)),
            low => Some(u64::from(low)),
        };
        let Some(n) = n.filter(|&n| n <= (total - done) as u64) else {
            return Err(format!(
                "a run at byte {tok_at} passes the chunk's {total} pointers ({done} decoded)"
            ));
        };
        for slot in out[done * 4..(done + n as usize) * 4].chunks_exact_mut(4) {
            slot.copy_from_slice(&HOLE.to_le_bytes());
        }
        c.run = c.run.wrapping_add(n as u32);
        c.done += n as usize;
        return Ok(());
    }
    if kind == LIT {
        if tok & 0x3f != 0 {
            return Err(format!(
                "literal token {tok:#04x} at byte {tok_at} has low bits set"
            ));
        }
        let z = read_leb(coded, &mut c.at)?;
        let d = ((z >> 1) as i64) ^ -((z & 1) as i64);
        // `d` is any i64: the sum may pass i64's range too.
        let p = i64::from(c.run).saturating_add(d);
        let Ok(p) = u32::try_from(p) else {
            return Err(format!(
                "literal at byte {tok_at} gives pointer {p}, outside 0..2^32"
            ));
        };
        if prev && p == HOLE {
            return Err(format!(
                "literal at byte {tok_at} gives pointer {HOLE}, which this coding reserves"
            ));
        }
        if done == total {
            return Err(format!(
                "the stream holds more than the chunk's {total} pointers (byte {tok_at})"
            ));
        }
        out[done * 4..done * 4 + 4].copy_from_slice(&p.to_le_bytes());
        c.run = p.wrapping_add(1);
        c.done += 1;
        return Ok(());
    }
    let n = match tok & 0x3f {
        LONG => read_leb(coded, &mut c.at)?.checked_add(64),
        low => Some(u64::from(low) + 1),
    };
    let Some(n) = n.filter(|&n| n <= (total - done) as u64) else {
        return Err(format!(
            "a run at byte {tok_at} passes the chunk's {total} pointers ({done} decoded)"
        ));
    };
    // `done + n <= total` (checked above): the run's slots, filled by
    // a loop the compiler vectorises.
    let slots = &mut out[done * 4..(done + n as usize) * 4];
    let first = match kind {
        RUN => c.run,
        NEW => {
            let p = c.next_new;
            c.next_new = u32::try_from(u64::from(c.next_new) + n).map_err(|_| {
                format!("new pointers at byte {tok_at} pass the 2^32 pointer space")
            })?;
            p
        }
        _ => zero,
    };
    let step = u32::from(kind != ZERO);
    // `first + step * (n - 1)`, mod 2^32: a run that would reach the
    // reserved pointer does so by its last one or wraps past it.
    if prev && (u64::from(first) + u64::from(step) * (n - 1) >= u64::from(HOLE) || first == HOLE) {
        return Err(format!(
            "a run at byte {tok_at} reaches pointer {HOLE}, which this coding reserves"
        ));
    }
    for (i, slot) in slots.chunks_exact_mut(4).enumerate() {
        let p = first.wrapping_add(step.wrapping_mul(i as u32));
        slot.copy_from_slice(&p.to_le_bytes());
    }
    c.run = c.run.wrapping_add(n as u32);
    c.done += n as usize;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes(p: &[u32]) -> Vec<u8> {
        p.iter().flat_map(|p| p.to_le_bytes()).collect()
    }

    fn round_trip(p: &[u32], state: State) -> Vec<u8> {
        round_trip_with(p, state, false)
    }

    fn round_trip_with(p: &[u32], state: State, prev: bool) -> Vec<u8> {
        let src = bytes(p);
        let mut coded = Vec::new();
        encode(&src, state, &mut coded, prev);
        let mut back = vec![0u8; src.len()];
        decode(&coded, &mut back, prev).unwrap();
        assert_eq!(back, src);
        coded
    }

    #[test]
    fn typical_pages_cost_a_few_bytes() {
        // Page 1 new (pointers 1000..1128), page 2 its previous version in
        // order with two patterns changed (new 1128, 1129) and a zero
        // pattern, page 3 all zero.
        let mut p: Vec<u32> = (1000..1128).collect();
        let mut q: Vec<u32> = (200..328).collect();
        q[5] = 1128;
        q[77] = 1129;
        q[90] = 7;
        p.extend(&q);
        p.extend(std::iter::repeat_n(7, 128));
        let state = State {
            next_new: 1000,
            zero: 7,
            run: 0,
        };
        let coded = round_trip(&p, state);
        assert!(coded.len() < STATE_LEN + 24, "{} bytes", coded.len());
        assert_eq!(state.advance(&bytes(&p), false).next_new, 1130);
    }

    #[test]
    fn kept_patterns_cost_a_token_per_run_with_prev() {
        // A page's kept patterns point where its previous version's did,
        // in no order the run predicts: literals without PREV, one token
        // per run with it.
        let mut p: Vec<u32> = (0..128u32).map(|j| (j * 7919) % 100_000).collect();
        p[10] = 5000;
        p[11] = 5001;
        let state = State {
            next_new: 5000,
            zero: 7,
            run: 0,
        };
        let without = round_trip_with(&p, state, false);
        let holes: Vec<u32> = p
            .iter()
            .map(|&x| if x == 5000 || x == 5001 { x } else { HOLE })
            .collect();
        let with = round_trip_with(&holes, state, true);
        assert!(without.len() > 128 * 3, "{}", without.len());
        // PREV 10, NEW 2, PREV 116 (a LEB128 count: 116 - 63).
        assert_eq!(
            with[STATE_LEN..],
            [LIT << 6 | 10, NEW << 6 | 1, LIT << 6 | LONG, 53]
        );
        let long = round_trip_with(&[HOLE; 300], state, true);
        assert_eq!(long[STATE_LEN..], [LIT << 6 | LONG, 0x80 | (237 & 0x7f), 1]);
    }

    #[test]
    fn the_hole_is_reserved_with_prev() {
        let mut out = vec![0u8; 8];
        let st = |next_new: u32, zero: u32, run: u32| {
            let mut s = next_new.to_le_bytes().to_vec();
            s.extend(zero.to_le_bytes());
            s.extend(run.to_le_bytes());
            s
        };
        // A RUN, ZERO or LIT that gives the hole's value.
        let mut s = st(0, 0, HOLE - 1);
        s.push(RUN << 6 | 1);
        assert!(decode(&s, &mut out, true).unwrap_err().contains("reserves"));
        assert!(decode(&s, &mut out, false).is_ok());
        let mut s = st(0, HOLE, 0);
        s.push(ZERO << 6 | 1);
        assert!(decode(&s, &mut out, true).unwrap_err().contains("reserves"));
        let mut s = st(0, 0, 0);
        s.push(LIT << 6);
        push_leb(&mut s, (i64::from(HOLE) << 1) as u64);
        s.push(RUN << 6);
        assert!(decode(&s, &mut out, true).unwrap_err().contains("reserves"));
        // Without prev, a PREV token is a literal with low bits set.
        let mut s = st(0, 0, 0);
        s.push(LIT << 6 | 2);
        assert!(
            decode(&s, &mut out, false)
                .unwrap_err()
                .contains("low bits")
        );
        decode(&s, &mut out, true).unwrap();
        assert_eq!(out, [HOLE.to_le_bytes(), HOLE.to_le_bytes()].concat());
        // A PREV run past the chunk.
        let mut s = st(0, 0, 0);
        s.push(LIT << 6 | 3);
        assert!(decode(&s, &mut out, true).unwrap_err().contains("passes"));
    }

    #[test]
    fn hostile_streams_are_errors() {
        let mut out = vec![0u8; 16];
        assert!(decode(&[0; 11], &mut out, false).is_err());
        // Too few pointers, too many, a run past the end.
        assert!(decode(&[0; 12], &mut out, false).is_err());
        let mut s = vec![0u8; 12];
        s.push(RUN << 6 | 4);
        assert!(decode(&s, &mut out, false).unwrap_err().contains("passes"));
        // A literal below 0, one past 2^32, one past i64's range.
        let mut s = vec![0u8; 12];
        s[8] = 1;
        s.push(LIT << 6);
        s.extend([0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        assert!(decode(&s, &mut out, false).unwrap_err().contains("outside"));
        let mut s = vec![0u8; 12];
        s.extend([LIT << 6, 1]);
        assert!(decode(&s, &mut out, false).unwrap_err().contains("outside"));
        // New pointers past 2^32.
        let mut s = u32::MAX.to_le_bytes().to_vec();
        s.extend([0; 8]);
        s.push(NEW << 6 | 1);
        assert!(decode(&s, &mut out, false).unwrap_err().contains("2^32"));
        // A number that never ends, one over 64 bits.
        let mut s = vec![0u8; 12];
        s.extend([LIT << 6, 0xff, 0xff]);
        assert!(decode(&s, &mut out, false).is_err());
        let mut s = vec![0u8; 12];
        s.push(LIT << 6);
        s.extend([0xff; 9]);
        s.push(0x7f);
        assert!(
            decode(&s, &mut out, false)
                .unwrap_err()
                .contains("overflows")
        );
    }

    proptest! {
        #[test]
        fn any_pointers_round_trip(
            p in proptest::collection::vec(prop_oneof![0u32..64, any::<u32>()], 0..600),
            next_new in 0u32..64, zero in 0u32..64, run in any::<u32>()
        ) {
            round_trip(&p, State { next_new, zero, run });
        }

        #[test]
        fn any_pointers_and_holes_round_trip_with_prev(
            p in proptest::collection::vec(
                prop_oneof![0u32..64, Just(HOLE), any::<u32>()], 0..600),
            next_new in 0u32..64, zero in 0u32..64, run in 0u32..1 << 31
        ) {
            round_trip_with(&p, State { next_new, zero, run }, true);
        }

        #[test]
        fn any_stream_decodes_or_errs(
            s in proptest::collection::vec(any::<u8>(), 0..200), n in 0usize..100,
            prev in any::<bool>()
        ) {
            let mut out = vec![0u8; n * 4];
            let _ = decode(&s, &mut out, prev);
        }

        /// The fast path gives what the token-by-token decoder gives: the
        /// same pointers, or the same error, on any bytes after a state and
        /// on coded pointers (mostly short runs and literals, the fast
        /// path's own tokens) with a byte changed or the end cut.
        #[test]
        fn the_fast_path_decodes_as_token_by_token(
            runs in proptest::collection::vec((
                prop_oneof![0u32..40, Just(HOLE), Just(HOLE - 1), any::<u32>()],
                1u32..12, any::<bool>()), 0..80),
            junk in proptest::collection::vec(any::<u8>(), 0..200),
            next_new in prop_oneof![0u32..40, Just(u32::MAX - 3)], zero in 0u32..40,
            run in prop_oneof![0u32..1 << 31, Just(HOLE - 2)],
            prev in any::<bool>(), flip in any::<(usize, u8)>(), cut in any::<usize>(),
            extra in 0usize..12,
        ) {
            let state = State { next_new, zero, run };
            // Runs of consecutive or equal pointers, of 1 to 11.
            let all: Vec<u32> = runs
                .into_iter()
                .flat_map(|(x, n, up)| (0..n).map(move |i| x.wrapping_add(i * u32::from(up))))
                .collect();
            let p: Vec<u32> = all.iter().copied().filter(|&x| prev || x != HOLE).collect();
            let mut coded = Vec::new();
            encode(&bytes(&p), state, &mut coded, prev);
            // The hole as an ordinary pointer (literals, runs reaching it)
            // read by either coding: with `prev`, an error at that token.
            let mut plain = Vec::new();
            encode(&bytes(&all), state, &mut plain, false);
            let mut random = coded[..STATE_LEN].to_vec();
            random.extend(&junk);
            let mut flipped = coded.clone();
            let at = STATE_LEN + flip.0 % (coded.len() - STATE_LEN + 1);
            if at < flipped.len() {
                flipped[at] ^= flip.1 | 1;
            }
            let cut = &coded[..STATE_LEN + cut % (coded.len() - STATE_LEN + 1)];
            for (s, len) in [
                (&coded[..], p.len()), (&random, p.len()), (&flipped, p.len()),
                (cut, p.len()), (&plain, all.len()),
            ] {
                for n in [len, len + extra, len.saturating_sub(extra)] {
                    let (mut a, mut b) = (vec![0u8; n * 4], vec![0u8; n * 4]);
                    let fast = decode_with(s, &mut a, prev, true);
                    let slow = decode_with(s, &mut b, prev, false);
                    prop_assert_eq!(&fast, &slow);
                    if fast.is_ok() {
                        prop_assert_eq!(&a, &b);
                    }
                }
            }
            let mut back = vec![0u8; p.len() * 4];
            decode(&coded, &mut back, prev).unwrap();
            prop_assert_eq!(back, bytes(&p));
        }
    }
}
