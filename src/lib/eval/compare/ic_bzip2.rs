//! IC-bzip2 (paper §6.1): at each L2 checkpoint the current full
//! checkpoint (the full image at the batch end, a FULL REX-IC file) is
//! compressed with bzip2 at level 9, the `bzip2` tool's default (900 kB
//! blocks), streaming. The restore decompresses the newest one, streaming,
//! straight into the output file.

use std::fs::File;
use std::path::Path;

use bzip2::Compression;
use bzip2::read::BzDecoder;
use bzip2::write::BzEncoder;

use crate::durable::AtomicFile;
use crate::error::{Error, IoContext, Result};

use super::{Batch, Counterpart, l2_objects};

const PREFIX: &str = "fc-";

/// Full checkpoints, bzip2-compressed.
pub struct IcBzip2;

impl Counterpart for IcBzip2 {
    fn name(&self) -> &'static str {
        "IC-bzip2"
    }

    fn needs_full_images(&self) -> bool {
        true
    }

    fn push(&mut self, batch: &Batch<'_>) -> Result<Option<String>> {
        let fc = batch
            .full_image
            .ok_or_else(|| Error::Invalid("IC-bzip2 needs the full image".into()))?;
        let dst = batch
            .l2
            .join(format!("{PREFIX}{:06}.rexic.bz2", batch.number));
        let mut src = File::open(fc).ctx(fc, "open")?;
        let mut enc = BzEncoder::new(AtomicFile::create(&dst)?, Compression::best());
        std::io::copy(&mut src, &mut enc).ctx(&dst, "bzip2 compress")?;
        enc.finish().ctx(&dst, "bzip2 compress")?.commit()?;
        Ok(None)
    }

    fn restore_reads(&self, l2: &Path) -> Result<u64> {
        let newest = l2_objects(l2, PREFIX)?
            .pop()
            .expect("l2_objects is never empty");
        Ok(std::fs::metadata(&newest).ctx(&newest, "stat")?.len())
    }

    fn restore(&self, l2: &Path, out: &Path) -> Result<Option<String>> {
        let newest = l2_objects(l2, PREFIX)?
            .pop()
            .expect("l2_objects is never empty");
        let mut dec = BzDecoder::new(File::open(&newest).ctx(&newest, "open")?);
        let mut o = AtomicFile::create(out)?;
        std::io::copy(&mut dec, &mut o).ctx(&newest, "bzip2 decompress")?;
        o.commit()?;
        Ok(None)
    }
}
