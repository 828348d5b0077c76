//! Libhash (libhashckpt, paper §6.4.2): hash-based incremental
//! deduplication in 256-byte blocks with a 16-byte MD5 fingerprint per
//! block. At each L2 checkpoint, every IC file of the batch is cut into
//! blocks; each block's fingerprint is stored, and the block itself only
//! when no block with that fingerprint was stored before (in any earlier L2
//! checkpoint or earlier in this one). Like libhashckpt, it trusts the
//! hash: two blocks with the same MD5 are taken to be the same block (the
//! byte-for-byte check of the restore would catch a collision). The
//! restore rebuilds every file of every checkpoint in order and applies it.
//!
//! Two objects per checkpoint: `lh-NNNNNN.fp` holds, per IC file, its
//! 64-byte REX-IC header, its metadata block (page index, drops, page
//! CRCs, `meta_crc`: docs/FORMAT.md §2.2) and the fingerprints of its
//! blocks in page order, after a header (magic `REXLH01\n`, block size u32,
//! file count u32); `lh-NNNNNN.blk` holds the new blocks in the order of
//! their first fingerprint, which is how the restore finds them.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use md5::{Digest, Md5};

use crate::durable::AtomicFile;
use crate::error::{Error, Result};
use crate::format::ic::{self, HEADER_LEN, IcFile, IcHeader, encode_meta};

use super::{Batch, Counterpart, Cursor, MemImage, check_page_crc, l2_objects, read_all};

/// Block size, as libhashckpt.
pub const BLOCK: usize = 256;
const MAGIC: &[u8; 8] = b"REXLH01\n";
const PREFIX: &str = "lh-";

/// A block's fingerprint.
type Fp = [u8; 16];

/// Hash-based incremental deduplication.
#[derive(Default)]
pub struct Libhash {
    known: HashSet<Fp>,
}

fn fingerprint(block: &[u8]) -> Fp {
    Md5::digest(block).into()
}

impl Counterpart for Libhash {
    fn name(&self) -> &'static str {
        "Libhash"
    }

    fn push(&mut self, batch: &Batch<'_>) -> Result<Option<String>> {
        let base = batch.l2.join(format!("{PREFIX}{:06}", batch.number));
        let (fp_path, blk_path) = (base.with_extension("fp"), base.with_extension("blk"));
        let mut fps = AtomicFile::create(&fp_path)?;
        let mut blks = AtomicFile::create(&blk_path)?;
        fps.write_all(MAGIC)?;
        fps.write_all(&(BLOCK as u32).to_le_bytes())?;
        fps.write_all(&(batch.files.len() as u32).to_le_bytes())?;
        for m in batch.files {
            let f = IcFile::open(&m.path)?;
            fps.write_all(
                &IcHeader {
                    ext_len: 0,
                    ..m.header
                }
                .encode(),
            )?;
            fps.write_all(&encode_meta(&m.pages, &m.drops, &m.page_crcs))?;
            for pp in 0..m.pages.len() {
                for block in f.page(pp)?.chunks_exact(BLOCK) {
                    let fp = fingerprint(block);
                    fps.write_all(&fp)?;
                    if self.known.insert(fp) {
                        blks.write_all(block)?;
                    }
                }
            }
        }
        blks.commit()?;
        fps.commit()?;
        Ok(None)
    }

    fn restore(&self, l2: &Path, out: &Path) -> Result<Option<String>> {
        let mut img = MemImage::default();
        // fingerprint -> (object, offset) of the block
        let mut where_: HashMap<Fp, (usize, usize)> = HashMap::new();
        let mut blocks: Vec<Vec<u8>> = Vec::new();
        for fp_path in l2_objects(l2, PREFIX)?
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "fp"))
        {
            let blk_path = fp_path.with_extension("blk");
            blocks.push(read_all(&blk_path)?);
            let k = blocks.len() - 1;
            let mut next = 0usize;
            let bytes = read_all(&fp_path)?;
            let mut c = Cursor::new(&fp_path, &bytes);
            if c.take(8, "magic")? != MAGIC {
                return Err(Error::corrupt(
                    &fp_path,
                    0,
                    "magic",
                    "not a Libhash checkpoint",
                ));
            }
            if c.u32("block size")? as usize != BLOCK {
                return Err(Error::corrupt(
                    &fp_path,
                    8,
                    "block size",
                    format!("not {BLOCK}"),
                ));
            }
            let files = c.u32("file count")?;
            for _ in 0..files {
                let at = c.offset() as u64;
                let hb: &[u8; HEADER_LEN as usize] = c
                    .take(HEADER_LEN as usize, "header")?
                    .try_into()
                    .expect("64 bytes");
                let h = IcHeader::decode(&fp_path, hb)?;
                let layout = h
                    .layout()
                    .ok_or_else(|| Error::corrupt(&fp_path, at, "header", "counts overflow"))?;
                let meta_len = (layout.meta_crc_off + 4 - HEADER_LEN) as usize;
                let meta = c.take(meta_len, "metadata")?;
                let (pages, drops, crcs, _) = ic::parse_meta(
                    &fp_path,
                    h.page_size,
                    h.page_count,
                    h.drop_count,
                    h.ext_len,
                    meta,
                )?;
                img.begin(&fp_path, &h, &drops)?;
                let ps = h.page_size as usize;
                let mut buf = vec![0u8; ps];
                for (pp, &page) in pages.iter().enumerate() {
                    let at = c.offset() as u64;
                    for b in 0..ps / BLOCK {
                        let fp: Fp = c.take(16, "fingerprint")?.try_into().expect("16 bytes");
                        let (o, off) = *where_.entry(fp).or_insert_with(|| {
                            next += BLOCK;
                            (k, next - BLOCK)
                        });
                        let src = blocks[o].get(off..off + BLOCK).ok_or_else(|| {
                            Error::corrupt(
                                &blk_path,
                                off as u64,
                                "blocks",
                                "fewer new blocks than new fingerprints",
                            )
                        })?;
                        buf[b * BLOCK..(b + 1) * BLOCK].copy_from_slice(src);
                    }
                    check_page_crc(&fp_path, at, page, &buf, crcs[pp])?;
                    img.set(page, crcs[pp], &buf);
                }
            }
            c.finish()?;
            if next != blocks[k].len() {
                return Err(Error::corrupt(
                    &blk_path,
                    next as u64,
                    "blocks",
                    format!(
                        "{} bytes of blocks no fingerprint uses",
                        blocks[k].len() - next
                    ),
                ));
            }
        }
        img.write(out)?;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_is_md5() {
        // RFC 1321 test suite: MD5("abc").
        let d = fingerprint(b"abc");
        let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "900150983cd24fb0d6963f7d28e17f72");
    }
}
