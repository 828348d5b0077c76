//! IC: plain incremental checkpointing (paper §6.1, "IC"). An L2 checkpoint
//! is the batch's IC files, copied uncompressed; the restore reads the FULL
//! file and applies every incremental after it in order, as a user without
//! REX does: every copy of every page is read, CRC-checked and written into
//! the image, drops applied as they come.

use std::path::Path;

use crate::error::Result;
use crate::format::ic::IcFile;

use super::{Batch, Counterpart, MemImage, durable_copy, l2_objects};

/// Object name prefix; the seq (20 digits) keeps them in order.
const PREFIX: &str = "ic-";

/// Plain incremental checkpointing.
pub struct Ic;

impl Counterpart for Ic {
    fn name(&self) -> &'static str {
        "IC"
    }

    fn push(&mut self, batch: &Batch<'_>) -> Result<Option<String>> {
        for m in batch.files {
            durable_copy(
                &m.path,
                &batch.l2.join(format!("{PREFIX}{:020}.rexic", m.seq())),
            )?;
        }
        Ok(None)
    }

    fn restore(&self, l2: &Path, out: &Path) -> Result<Option<String>> {
        let mut img = MemImage::default();
        for p in l2_objects(l2, PREFIX)? {
            img.apply(&IcFile::open(&p)?)?;
        }
        img.write(out)?;
        Ok(None)
    }
}
