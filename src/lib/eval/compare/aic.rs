//! AIC, Xdelta3-PA (paper §6.4.2): page-aligned delta compression. At each
//! L2 checkpoint, every page of the batch's C-List (the last copy of each
//! page the batch wrote) is delta-encoded with xdelta3 against its own
//! previous version, the one the previous L2 checkpoint holds; a page with
//! no previous version (every page of the first checkpoint, new pages) is
//! stored raw, and so is a page whose delta would not be smaller. The
//! first checkpoint therefore cannot be compressed, as the paper notes. The
//! restore decodes every checkpoint in order, each page against the version
//! the image holds at that point.
//!
//! This counterpart is given the batch's C-List, i.e. it benefits from
//! REX's coalescing (the paper's AIC compresses every checkpoint file); the
//! comparison is generous to it, not to REX.
//!
//! One object per checkpoint, `aic-NNNNNN.l2`, little-endian:
//!
//! ```text
//! magic "REXAIC1\n" | page_size u32 | full u32 | seq u64 | time_ns u64
//! drop_count u64 | drop_count x (first u64, count u64)
//! page_count u64 | page_count x (page u64, crc32 u32, kind u32 (0 raw, 1 delta), len u32)
//! payloads, in page order
//! ```

use std::path::Path;

use crate::error::Result;

use super::{Batch, Counterpart, MemImage, NOT_BUILT_XDELTA3, XDELTA3_BUILT};

#[cfg(feature = "xdelta3")]
use {
    super::{Cursor, check_page_crc, ic_xdelta3, l2_objects, read_all},
    crate::error::Error,
    crate::format::ic::{DropRange, IcHeader},
    crate::l1::coalesce::{CList, open_referenced},
};

#[cfg(feature = "xdelta3")]
const MAGIC: &[u8; 8] = b"REXAIC1\n";
#[cfg(feature = "xdelta3")]
const PREFIX: &str = "aic-";

/// Page-aligned delta compression against each page's previous version.
#[derive(Default)]
pub struct Aic {
    /// The state the previous L2 checkpoint holds.
    #[cfg_attr(not(feature = "xdelta3"), allow(dead_code))]
    prev: MemImage,
}

impl Counterpart for Aic {
    fn name(&self) -> &'static str {
        "AIC"
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
        let clist = CList::build(batch.files)?;
        let files = open_referenced(batch.files, &clist.entries)?;
        let ps = clist.page_size;
        let dst = batch.l2.join(format!("{PREFIX}{:06}.l2", batch.number));
        let header = IcHeader {
            page_size: ps,
            seq: clist.last_seq,
            full: clist.full,
            page_count: clist.entries.len() as u64,
            drop_count: clist.drops.len() as u64,
            time_ns: batch.files[batch.files.len() - 1].header.time_ns,
            ext_len: 0,
        };
        self.prev.begin(&dst, &header, &clist.drops)?;
        let mut meta = Vec::with_capacity(48 + clist.drops.len() * 16 + clist.entries.len() * 20);
        meta.extend_from_slice(MAGIC);
        meta.extend_from_slice(&ps.to_le_bytes());
        meta.extend_from_slice(&u32::from(clist.full).to_le_bytes());
        meta.extend_from_slice(&header.seq.to_le_bytes());
        meta.extend_from_slice(&header.time_ns.to_le_bytes());
        meta.extend_from_slice(&(clist.drops.len() as u64).to_le_bytes());
        for d in &clist.drops {
            meta.extend_from_slice(&d.first.to_le_bytes());
            meta.extend_from_slice(&d.count.to_le_bytes());
        }
        meta.extend_from_slice(&(clist.entries.len() as u64).to_le_bytes());
        let mut deltas: Vec<Option<Vec<u8>>> = Vec::with_capacity(clist.entries.len());
        for e in &clist.entries {
            let f = files[e.chk as usize]
                .as_ref()
                .expect("referenced files are open");
            let data = f.page(e.pp as usize)?;
            let crc = f.meta().page_crcs[e.pp as usize];
            let delta = match self.prev.pages.get(&e.page) {
                Some((_, old)) => match ic_xdelta3::encode(data, old)? {
                    Ok(d) if d.len() < data.len() => Some(d),
                    Ok(_) => None,
                    Err(why) => return Ok(Some(why)),
                },
                None => None,
            };
            let len = delta.as_ref().map_or(data.len(), Vec::len) as u32;
            meta.extend_from_slice(&e.page.to_le_bytes());
            meta.extend_from_slice(&crc.to_le_bytes());
            meta.extend_from_slice(&u32::from(delta.is_some()).to_le_bytes());
            meta.extend_from_slice(&len.to_le_bytes());
            deltas.push(delta);
            self.prev.set(e.page, crc, data);
        }
        let mut out = crate::durable::AtomicFile::create(&dst)?;
        out.write_all(&meta)?;
        for (e, d) in clist.entries.iter().zip(&deltas) {
            match d {
                Some(d) => out.write_all(d)?,
                None => {
                    let f = files[e.chk as usize]
                        .as_ref()
                        .expect("referenced files are open");
                    out.write_all(f.page(e.pp as usize)?)?
                }
            }
        }
        out.commit()?;
        Ok(None)
    }

    #[cfg(not(feature = "xdelta3"))]
    fn restore(&self, _l2: &Path, _out: &Path) -> Result<Option<String>> {
        Ok(Some(NOT_BUILT_XDELTA3.into()))
    }

    #[cfg(feature = "xdelta3")]
    fn restore(&self, l2: &Path, out: &Path) -> Result<Option<String>> {
        let mut img = MemImage::default();
        for p in l2_objects(l2, PREFIX)? {
            let bytes = read_all(&p)?;
            let mut c = Cursor::new(&p, &bytes);
            if c.take(8, "magic")? != MAGIC {
                return Err(Error::corrupt(&p, 0, "magic", "not an AIC checkpoint"));
            }
            let page_size = c.u32("page_size")?;
            let full = c.u32("full")? != 0;
            let seq = c.u64("seq")?;
            let time_ns = c.u64("time_ns")?;
            let nd = c.count(16, "drop_count")?;
            let mut drops = Vec::with_capacity(nd);
            for _ in 0..nd {
                let (first, count) = (c.u64("drop first")?, c.u64("drop count")?);
                if count == 0 || first.checked_add(count).is_none() {
                    return Err(Error::corrupt(
                        &p,
                        c.offset() as u64,
                        "drop",
                        "empty or overflowing range",
                    ));
                }
                drops.push(DropRange { first, count });
            }
            let np = c.count(20, "page_count")?;
            let header = IcHeader {
                page_size,
                seq,
                full,
                page_count: np as u64,
                drop_count: nd as u64,
                time_ns,
                ext_len: 0,
            };
            img.begin(&p, &header, &drops)?;
            let mut recs = Vec::with_capacity(np);
            for _ in 0..np {
                recs.push((
                    c.u64("page")?,
                    c.u32("crc")?,
                    c.u32("kind")?,
                    c.u32("len")? as usize,
                ));
            }
            for (page, crc, kind, len) in recs {
                let at = c.offset() as u64;
                let payload = c.take(len, "payload")?;
                if kind == 0 {
                    if len != page_size as usize {
                        return Err(Error::corrupt(
                            &p,
                            at,
                            "payload",
                            format!("raw page of {len} bytes"),
                        ));
                    }
                    check_page_crc(&p, at, page, payload, crc)?;
                    img.set(page, crc, payload);
                    continue;
                }
                let Some((_, old)) = img.pages.get(&page) else {
                    return Err(Error::corrupt(
                        &p,
                        at,
                        "payload",
                        format!("delta for page {page:#x}, which the image lacks"),
                    ));
                };
                let new = match ic_xdelta3::decode(&p, payload, old, u64::from(page_size))? {
                    Ok(v) => v,
                    Err(why) => return Ok(Some(why)),
                };
                check_page_crc(&p, at, page, &new, crc)?;
                img.set(page, crc, &new);
            }
            c.finish()?;
        }
        img.write(out)?;
        Ok(None)
    }
}
