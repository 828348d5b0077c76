//! The Xref file of a generation of an MPI job (docs/FORMAT.md §3.9.2):
//! the pages this rank wrote whose contents another rank of the same job
//! generation stores (collective deduplication, Nicolae IPDPS'13).
//!
//! Each record names one page of this generation's P-Table delta and where
//! its bytes are: the owner rank, the owner's generation (of the same job
//! generation) and the page number there. The page keeps its CRC in this
//! rank's P-Table delta, so a restore checks the borrowed bytes against
//! this rank's own record as well as the owner's; its `alpha` pointers in
//! the Pointer File are zero and never read.
//!
//! Small and read whole: the count is bounded by the file length before
//! anything is allocated.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::durable;
use crate::error::{Error, IoContext, Result};

/// The 8-byte magic.
pub const MAGIC: [u8; 8] = *b"REXXR01\n";
/// Version of the layout.
pub const VERSION: u32 = 1;
const HEADER_LEN: u64 = 64;
/// Bytes per record.
pub const RECORD_LEN: u64 = 32;

/// One cross-rank reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Xref {
    /// The page of this rank (in this generation's P-Table delta).
    pub page: u64,
    /// The rank that stores the page's bytes.
    pub owner_rank: u32,
    /// The owner's generation (of the same job generation) that wrote them.
    pub owner_generation: u64,
    /// The page number in the owner's generation.
    pub owner_page: u64,
}

/// One generation's Xref file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XrefFile {
    /// Where it was read from (empty when built in memory).
    pub path: PathBuf,
    /// The generation.
    pub generation: u64,
    /// The references, ascending by page.
    pub refs: Vec<Xref>,
}

impl XrefFile {
    /// Encodes the file.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_LEN as usize];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[16..24].copy_from_slice(&self.generation.to_le_bytes());
        b[24..32].copy_from_slice(&(self.refs.len() as u64).to_le_bytes());
        let crc = crc32fast::hash(&b[0..56]);
        b[56..60].copy_from_slice(&crc.to_le_bytes());
        let start = b.len();
        for r in &self.refs {
            b.extend_from_slice(&r.page.to_le_bytes());
            b.extend_from_slice(&r.owner_rank.to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
            b.extend_from_slice(&r.owner_generation.to_le_bytes());
            b.extend_from_slice(&r.owner_page.to_le_bytes());
        }
        let crc = crc32fast::hash(&b[start..]);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Writes the file durably at `path`; returns (length, CRC-32 of the
    /// file).
    pub fn write(&self, path: &Path) -> Result<(u64, u32)> {
        if !self.refs.windows(2).all(|w| w[0].page < w[1].page) {
            return Err(Error::Invalid(format!(
                "{}: refusing to write cross-rank references that are not ascending by page",
                path.display()
            )));
        }
        let b = self.encode();
        durable::write_file(path, &b)?;
        Ok((b.len() as u64, crc32fast::hash(&b)))
    }

    /// Reads and checks `path`.
    pub fn read(path: impl AsRef<Path>) -> Result<XrefFile> {
        let path = path.as_ref();
        let mut file = super::open_regular(path)?;
        let (len, h) = super::read_header(path, &file)?;
        let le32 = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().expect("4"));
        let le64 = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().expect("8"));
        super::check_prefix(path, &h, &MAGIC, "an Xref file", VERSION)?;
        for off in [12usize, 32, 36, 40, 44, 48, 52, 60] {
            if le32(off) != 0 {
                return Err(Error::corrupt(path, off as u64, "reserved", "must be 0"));
            }
        }
        let count = le64(24);
        let want = count
            .checked_mul(RECORD_LEN)
            .and_then(|x| x.checked_add(HEADER_LEN + 4));
        if want != Some(len) {
            return Err(Error::corrupt(
                path,
                24,
                "count",
                format!("{count} records do not match the file length {len}"),
            ));
        }
        // The length matched the count: the allocation is the file's size.
        let mut body = Vec::with_capacity((len - HEADER_LEN) as usize);
        std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(HEADER_LEN)).ctx(path, "seek")?;
        file.read_to_end(&mut body).ctx(path, "read")?;
        if body.len() as u64 != len - HEADER_LEN {
            return Err(Error::corrupt(
                path,
                HEADER_LEN + body.len() as u64,
                "records",
                "the file changed length while being read",
            ));
        }
        let (recs, tail) = body.split_at(body.len() - 4);
        let stored = u32::from_le_bytes(tail.try_into().expect("4"));
        let actual = crc32fast::hash(recs);
        if stored != actual {
            return Err(Error::corrupt(
                path,
                len - 4,
                "records_crc",
                format!("stored {stored:#010x}, computed {actual:#010x} over the records"),
            ));
        }
        let mut refs = Vec::with_capacity(count as usize);
        for (i, r) in recs.chunks_exact(RECORD_LEN as usize).enumerate() {
            let at = HEADER_LEN + i as u64 * RECORD_LEN;
            let f64_ = |o: usize| u64::from_le_bytes(r[o..o + 8].try_into().expect("8"));
            if r[12..16] != [0; 4] {
                return Err(Error::corrupt(path, at + 12, "reserved", "must be 0"));
            }
            let x = Xref {
                page: f64_(0),
                owner_rank: u32::from_le_bytes(r[8..12].try_into().expect("4")),
                owner_generation: f64_(16),
                owner_page: f64_(24),
            };
            if refs.last().is_some_and(|p: &Xref| p.page >= x.page) {
                return Err(Error::corrupt(
                    path,
                    at,
                    "page",
                    format!("page {:#x} is not above the record before it", x.page),
                ));
            }
            refs.push(x);
        }
        Ok(XrefFile {
            path: path.to_path_buf(),
            generation: le64(16),
            refs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> XrefFile {
        XrefFile {
            path: PathBuf::new(),
            generation: 7,
            refs: vec![
                Xref {
                    page: 3,
                    owner_rank: 1,
                    owner_generation: 9,
                    owner_page: 40,
                },
                Xref {
                    page: 5,
                    owner_rank: 0,
                    owner_generation: 7,
                    owner_page: 5,
                },
            ],
        }
    }

    #[test]
    fn an_xref_file_round_trips_and_every_flipped_byte_is_caught() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("g00000007.xref");
        let x = sample();
        x.write(&p).unwrap();
        let back = XrefFile::read(&p).unwrap();
        assert_eq!(back.refs, x.refs);
        assert_eq!(back.generation, 7);
        let good = std::fs::read(&p).unwrap();
        for i in 0..good.len() {
            let mut b = good.clone();
            b[i] ^= 0x10;
            std::fs::write(&p, &b).unwrap();
            assert!(XrefFile::read(&p).is_err(), "byte {i} flipped was accepted");
        }
        // A count that claims more records than the file holds is refused
        // from the length, before anything is allocated.
        let mut b = good.clone();
        b[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
        let crc = crc32fast::hash(&b[0..56]);
        b[56..60].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&p, &b).unwrap();
        let e = XrefFile::read(&p).unwrap_err().to_string();
        assert!(e.contains("count"), "{e}");
    }

    #[test]
    fn records_out_of_order_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        let mut x = sample();
        x.refs.swap(0, 1);
        assert!(x.write(&p).is_err());
        std::fs::write(&p, x.encode()).unwrap();
        let e = XrefFile::read(&p).unwrap_err().to_string();
        assert!(e.contains("not above"), "{e}");
    }
}
