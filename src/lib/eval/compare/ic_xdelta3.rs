//! IC-Xdelta3 (paper §6.1): at each L2 checkpoint the current full
//! checkpoint (the full image at the batch end, a FULL REX-IC file) is
//! delta-compressed with xdelta3 against the first full checkpoint. The
//! first one is kept as it is (it has nothing to be a delta of). The
//! restore decodes the newest delta against the first image.
//!
//! The `xdelta3` crate (cargo feature `xdelta3`; it runs bindgen at build
//! time, so it needs libclang) has two limitations, guarded here and
//! reported as such instead of failing silently (see [`encode_guard`] and
//! [`decode_guard`]): it passes every length as a C `unsigned int` and sizes
//! its output buffer as `(input + source) * 2` in that type, so input plus
//! source must stay below 2 GiB; and its `decode` preallocates only
//! `(delta + source) * 2` bytes, so a target larger than that (an image that
//! grew to more than twice the first one with a small delta) cannot be
//! decoded. Each delta is stored after its target's length (8 bytes), so the
//! restore checks the second guard before decoding.

use std::path::Path;

use crate::error::Result;
#[cfg(feature = "xdelta3")]
use crate::error::{Error, IoContext};

use super::{Batch, Counterpart, NOT_BUILT_XDELTA3, XDELTA3_BUILT};
#[cfg(feature = "xdelta3")]
use super::{durable_copy, read_all};

#[cfg(feature = "xdelta3")]
const BASE: &str = "xd-base.rexic";
#[cfg(feature = "xdelta3")]
const DELTA: &str = "xd-delta-";

/// Largest `input + source` (or `delta + source`) the crate's 32-bit
/// arithmetic `(a + b) * 2` holds.
#[cfg_attr(not(feature = "xdelta3"), allow(dead_code))]
pub const XD3_MAX_SUM: u64 = (u32::MAX / 2) as u64;

/// Why xdelta3 cannot encode a target of `target` bytes against a source of
/// `source` bytes through the crate, if it cannot.
#[cfg_attr(not(feature = "xdelta3"), allow(dead_code))]
pub fn encode_guard(target: u64, source: u64) -> Option<String> {
    (target.saturating_add(source) > XD3_MAX_SUM).then(|| {
        format!(
            "limitation of the xdelta3 crate: it keeps sizes in 32 bits ((input + source) x 2 must fit in a C unsigned int); \
             the target ({target} bytes) plus the source ({source} bytes) exceed {XD3_MAX_SUM} bytes"
        )
    })
}

/// Why the crate's `decode` cannot rebuild a target of `target` bytes from
/// a delta of `delta` bytes and a source of `source` bytes, if it cannot.
#[cfg_attr(not(feature = "xdelta3"), allow(dead_code))]
pub fn decode_guard(target: u64, delta: u64, source: u64) -> Option<String> {
    let sum = delta.saturating_add(source);
    if sum > XD3_MAX_SUM {
        return Some(format!(
            "limitation of the xdelta3 crate: it keeps sizes in 32 bits; the delta ({delta} bytes) plus the source \
             ({source} bytes) exceed {XD3_MAX_SUM} bytes"
        ));
    }
    (target > sum * 2).then(|| {
        format!(
            "limitation of the xdelta3 crate: its decode preallocates only (delta + source) x 2 = {} bytes, \
             the target is {target} bytes (delta {delta}, source {source})",
            sum * 2
        )
    })
}

/// Delta-encodes `target` against `source` through the crate, guarded:
/// `Ok(Err(why))` when a limitation prevents encoding or decoding it back.
#[cfg(feature = "xdelta3")]
pub fn encode(target: &[u8], source: &[u8]) -> Result<std::result::Result<Vec<u8>, String>> {
    if target.is_empty() || source.is_empty() {
        return Err(Error::Invalid("xdelta3: empty target or source".into()));
    }
    let (t, s) = (target.len() as u64, source.len() as u64);
    if let Some(why) = encode_guard(t, s) {
        return Ok(Err(why));
    }
    let delta = xdelta3::encode(target, source)
        .ok_or_else(|| Error::Invalid(format!("xdelta3 encode failed ({t} bytes against {s})")))?;
    if let Some(why) = decode_guard(t, delta.len() as u64, s) {
        return Ok(Err(why));
    }
    Ok(Ok(delta))
}

/// Decodes `delta` against `source` into a target of `target` bytes,
/// guarded as [`encode`]; `path` names the delta in errors.
#[cfg(feature = "xdelta3")]
pub fn decode(
    path: &Path,
    delta: &[u8],
    source: &[u8],
    target: u64,
) -> Result<std::result::Result<Vec<u8>, String>> {
    if let Some(why) = decode_guard(target, delta.len() as u64, source.len() as u64) {
        return Ok(Err(why));
    }
    let out = xdelta3::decode(delta, source)
        .ok_or_else(|| Error::corrupt(path, 0, "delta", "xdelta3 decode failed"))?;
    if out.len() as u64 != target {
        return Err(Error::corrupt(
            path,
            0,
            "delta",
            format!("decoded {} bytes, {target} expected", out.len()),
        ));
    }
    Ok(Ok(out))
}

/// Full checkpoints, xdelta3 against the first.
#[derive(Default)]
pub struct IcXdelta3 {
    #[cfg_attr(not(feature = "xdelta3"), allow(dead_code))]
    base: Option<Vec<u8>>,
}

impl Counterpart for IcXdelta3 {
    fn name(&self) -> &'static str {
        "IC-Xdelta3"
    }

    fn needs_full_images(&self) -> bool {
        true
    }

    fn unavailable(&self) -> Option<String> {
        (!XDELTA3_BUILT).then(|| NOT_BUILT_XDELTA3.to_string())
    }

    #[cfg(not(feature = "xdelta3"))]
    fn push(&mut self, _batch: &Batch<'_>) -> Result<Option<String>> {
        Ok(Some(NOT_BUILT_XDELTA3.into()))
    }

    #[cfg(feature = "xdelta3")]
    fn push(&mut self, batch: &Batch<'_>) -> Result<Option<String>> {
        let fc = batch
            .full_image
            .ok_or_else(|| Error::Invalid("IC-Xdelta3 needs the full image".into()))?;
        let Some(base) = &self.base else {
            durable_copy(fc, &batch.l2.join(BASE))?;
            self.base = Some(read_all(fc)?);
            return Ok(None);
        };
        let target = read_all(fc)?;
        let delta = match encode(&target, base)? {
            Ok(d) => d,
            Err(why) => return Ok(Some(why)),
        };
        let dst = batch.l2.join(format!("{DELTA}{:06}.vcdiff", batch.number));
        let mut out = crate::durable::AtomicFile::create(&dst)?;
        out.write_all(&(target.len() as u64).to_le_bytes())?;
        out.write_all(&delta)?;
        out.commit()?;
        Ok(None)
    }

    #[cfg(feature = "xdelta3")]
    fn restore_reads(&self, l2: &Path) -> Result<u64> {
        let newest = super::l2_objects(l2, DELTA).ok().and_then(|mut v| v.pop());
        let mut n = 0;
        for p in std::iter::once(l2.join(BASE)).chain(newest) {
            n += std::fs::metadata(&p).ctx(&p, "stat")?.len();
        }
        Ok(n)
    }

    #[cfg(not(feature = "xdelta3"))]
    fn restore(&self, _l2: &Path, _out: &Path) -> Result<Option<String>> {
        Ok(Some(NOT_BUILT_XDELTA3.into()))
    }

    #[cfg(feature = "xdelta3")]
    fn restore(&self, l2: &Path, out: &Path) -> Result<Option<String>> {
        let base_path = l2.join(BASE);
        let base = read_all(&base_path)?;
        let deltas = super::l2_objects(l2, DELTA).unwrap_or_default();
        let Some(newest) = deltas.last() else {
            crate::durable::write_file(out, &base)?;
            return Ok(None);
        };
        let bytes = read_all(newest)?;
        let mut c = super::Cursor::new(newest, &bytes);
        let target = c.u64("target length")?;
        let delta = c.take(bytes.len() - 8, "delta")?;
        let image = match decode(newest, delta, &base, target)? {
            Ok(v) => v,
            Err(why) => return Ok(Some(why)),
        };
        let mut o = crate::durable::AtomicFile::create(out)?;
        o.write_all(&image)?;
        o.commit()?;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_report_the_crate_limits() {
        assert!(encode_guard(4096, 4096).is_none());
        assert!(encode_guard(XD3_MAX_SUM, 1).unwrap().contains("32 bits"));
        assert!(decode_guard(4096, 10, 4096).is_none());
        let why = decode_guard(1 << 20, 19, 1000).unwrap();
        assert!(
            why.contains("preallocates only (delta + source) x 2 = 2038 bytes"),
            "{why}"
        );
        assert!(
            decode_guard(10, XD3_MAX_SUM, 1)
                .unwrap()
                .contains("32 bits")
        );
    }

    /// The guard is right about the crate: a target beyond (delta + source)
    /// x 2 does not decode, one within does.
    #[cfg(feature = "xdelta3")]
    #[test]
    fn the_decode_guard_matches_the_crate() {
        let zeros = vec![0u8; 1 << 20];
        let src = vec![1u8; 1000];
        let d = xdelta3::encode(&zeros, &src).unwrap();
        assert!(decode_guard(zeros.len() as u64, d.len() as u64, 1000).is_some());
        assert!(
            xdelta3::decode(&d, &src).is_none(),
            "the crate fails where the guard says"
        );
        assert!(encode(&zeros, &src).unwrap().is_err());
        let page: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut p2 = page.clone();
        p2[100..300].fill(9);
        let d = encode(&p2, &page).unwrap().unwrap();
        let back = decode(Path::new("d"), &d, &page, 4096).unwrap().unwrap();
        assert_eq!(back, p2);
    }
}
