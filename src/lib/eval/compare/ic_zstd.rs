//! zstd: what a user would pick today, and the strongest practical
//! competitor. An L2 checkpoint is each IC file of the batch compressed with
//! zstd, one frame per file: `zstd` at its default level (3), one thread, or
//! `zstd-19` at level 19 with long-distance matching and a 128 MiB window
//! (`zstd -19 --long`), the smallest a user gets from the tool. The restore
//! decompresses every file in order and applies it (FULL, then the
//! incrementals), checking every page's CRC as the IC restore does.

use std::fs::File;
use std::path::Path;

use crate::durable::AtomicFile;
use crate::error::{IoContext, Result};

use super::{Batch, Counterpart, MemIc, MemImage, l2_objects};

const PREFIX: &str = "ic-";
/// `--long`'s window: 2^27 bytes (128 MiB), the tool's default for it.
const LONG_WINDOW_LOG: u32 = 27;

/// IC files, each zstd-compressed.
pub struct IcZstd {
    /// Its name in the tables.
    pub name: &'static str,
    /// zstd level.
    pub level: i32,
    /// Long-distance matching with a 128 MiB window (`--long`).
    pub long: bool,
}

impl IcZstd {
    /// `zstd` per file at the default level.
    pub fn default_level() -> IcZstd {
        IcZstd {
            name: "zstd",
            level: zstd::DEFAULT_COMPRESSION_LEVEL,
            long: false,
        }
    }

    /// `zstd -19 --long` per file.
    pub fn best() -> IcZstd {
        IcZstd {
            name: "zstd-19",
            level: 19,
            long: true,
        }
    }
}

impl Counterpart for IcZstd {
    fn name(&self) -> &'static str {
        self.name
    }

    fn push(&mut self, batch: &Batch<'_>) -> Result<Option<String>> {
        for m in batch.files {
            let dst = batch.l2.join(format!("{PREFIX}{:020}.rexic.zst", m.seq()));
            let mut src = File::open(&m.path).ctx(&m.path, "open")?;
            let mut enc = zstd::stream::Encoder::new(AtomicFile::create(&dst)?, self.level)
                .ctx(&dst, "zstd compress")?;
            if self.long {
                enc.long_distance_matching(true)
                    .and_then(|()| enc.window_log(LONG_WINDOW_LOG))
                    .ctx(&dst, "zstd --long")?;
            }
            std::io::copy(&mut src, &mut enc).ctx(&dst, "zstd compress")?;
            enc.finish().ctx(&dst, "zstd compress")?.commit()?;
        }
        Ok(None)
    }

    fn restore(&self, l2: &Path, out: &Path) -> Result<Option<String>> {
        let mut img = MemImage::default();
        for p in l2_objects(l2, PREFIX)? {
            let f = File::open(&p).ctx(&p, "open")?;
            let mut dec = zstd::stream::Decoder::new(f).ctx(&p, "zstd decompress")?;
            if self.long {
                dec.window_log_max(LONG_WINDOW_LOG).ctx(&p, "zstd --long")?;
            }
            let mut bytes = Vec::new();
            std::io::copy(&mut dec, &mut bytes).ctx(&p, "zstd decompress")?;
            img.apply(&MemIc::parse(&p, bytes)?)?;
        }
        img.write(out)?;
        Ok(None)
    }
}
