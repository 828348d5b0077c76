//! zstd: what a user would pick today, and the strongest practical
//! competitor. An L2 checkpoint is each IC file of the batch compressed with
//! zstd at its default level (3), one thread, one frame per file; the
//! restore decompresses every file in order and applies it (FULL, then the
//! incrementals), checking every page's CRC as the IC restore does.

use std::fs::File;
use std::path::Path;

use crate::durable::AtomicFile;
use crate::error::{IoContext, Result};

use super::{Batch, Counterpart, MemIc, MemImage, l2_objects};

const PREFIX: &str = "ic-";

/// IC files, each zstd-compressed.
pub struct IcZstd;

impl Counterpart for IcZstd {
    fn name(&self) -> &'static str {
        "zstd"
    }

    fn push(&mut self, batch: &Batch<'_>) -> Result<Option<String>> {
        for m in batch.files {
            let dst = batch.l2.join(format!("{PREFIX}{:020}.rexic.zst", m.seq()));
            let src = File::open(&m.path).ctx(&m.path, "open")?;
            let mut out = AtomicFile::create(&dst)?;
            zstd::stream::copy_encode(src, &mut out, zstd::DEFAULT_COMPRESSION_LEVEL)
                .ctx(&dst, "zstd compress")?;
            out.commit()?;
        }
        Ok(None)
    }

    fn restore(&self, l2: &Path, out: &Path) -> Result<Option<String>> {
        let mut img = MemImage::default();
        for p in l2_objects(l2, PREFIX)? {
            let f = File::open(&p).ctx(&p, "open")?;
            let bytes = zstd::stream::decode_all(f).ctx(&p, "zstd decompress")?;
            img.apply(&MemIc::parse(&p, bytes)?)?;
        }
        img.write(out)?;
        Ok(None)
    }
}
