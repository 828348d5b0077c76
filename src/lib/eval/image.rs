//! Memory images: comparing two FULL images page by page.
//!
//! Restores are judged against a ground truth, and every comparison the
//! tools make (the demo, `compare`, the tests) goes through
//! [`compare_ic_files`], so "byte-exact" means one thing everywhere.

use std::path::Path;

use serde::Serialize;

use crate::error::Result;
use crate::format::ic::IcFile;

/// The first difference between two images, if any.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum ImageDiff {
    /// Same live pages, same bytes.
    Equal {
        /// Pages compared.
        pages: u64,
    },
    /// The page sets differ.
    PageSet {
        /// A page present in one image only.
        page: u64,
        /// Whether it is the left image that has it.
        in_left: bool,
    },
    /// A page's contents differ.
    Content {
        /// The page.
        page: u64,
        /// First differing byte within the page.
        byte: usize,
    },
    /// The page sizes differ.
    PageSize {
        /// Left page size.
        left: u32,
        /// Right page size.
        right: u32,
    },
}

impl ImageDiff {
    /// Whether the images are equal.
    pub fn is_equal(&self) -> bool {
        matches!(self, ImageDiff::Equal { .. })
    }
}

impl std::fmt::Display for ImageDiff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ImageDiff::Equal { pages } => write!(f, "equal ({pages} pages)"),
            ImageDiff::PageSet { page, in_left } => write!(
                f,
                "page {page:#x} is only in the {} image",
                if *in_left { "first" } else { "second" }
            ),
            ImageDiff::Content { page, byte } => {
                write!(f, "page {page:#x} differs from byte {byte}")
            }
            ImageDiff::PageSize { left, right } => {
                write!(f, "page sizes differ: {left} and {right}")
            }
        }
    }
}

/// Compares the pages of two REX-IC files (typically FULL images), with
/// every page CRC-checked on the way.
pub fn compare_ic_files(left: &Path, right: &Path) -> Result<ImageDiff> {
    let a = IcFile::open(left)?;
    let b = IcFile::open(right)?;
    let (ma, mb) = (a.meta(), b.meta());
    if ma.header.page_size != mb.header.page_size {
        return Ok(ImageDiff::PageSize {
            left: ma.header.page_size,
            right: mb.header.page_size,
        });
    }
    let (mut i, mut j) = (0, 0);
    while i < ma.pages.len() || j < mb.pages.len() {
        match (ma.pages.get(i), mb.pages.get(j)) {
            (Some(&p), Some(&q)) if p == q => {
                let (x, y) = (a.page(i)?, b.page(j)?);
                if x != y {
                    let byte = x.iter().zip(y).position(|(u, v)| u != v).unwrap_or(0);
                    return Ok(ImageDiff::Content { page: p, byte });
                }
                i += 1;
                j += 1;
            }
            (Some(&p), Some(&q)) => {
                return Ok(ImageDiff::PageSet {
                    page: p.min(q),
                    in_left: p < q,
                });
            }
            (Some(&p), None) => {
                return Ok(ImageDiff::PageSet {
                    page: p,
                    in_left: true,
                });
            }
            (None, Some(&q)) => {
                return Ok(ImageDiff::PageSet {
                    page: q,
                    in_left: false,
                });
            }
            (None, None) => unreachable!("loop condition"),
        }
    }
    Ok(ImageDiff::Equal {
        pages: ma.pages.len() as u64,
    })
}
