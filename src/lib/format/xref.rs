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
//! The records are coded so that their size follows what they carry: in
//! four columns (page deltas, owner ranks, owner generations, owner page
//! minus page), then zstd. A run of pages whose owner holds them at the
//! same numbers, as a replicated table has, costs a few bytes, not 32 per
//! page. The decoded size is bounded by the caller's page count before
//! anything is allocated, and both the stored and the decoded bytes are
//! CRC-checked.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::durable;
use crate::error::{Error, IoContext, Result};

/// The 8-byte magic.
pub const MAGIC: [u8; 8] = *b"REXXR01\n";
/// Version of the layout.
pub const VERSION: u32 = 1;
const HEADER_LEN: u64 = 64;
/// Bytes of one record in the decoded columns.
pub const RECORD_LEN: u64 = 28;
/// zstd level of the records.
const LEVEL: i32 = 3;

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
    /// The decoded columns of the records.
    fn columns(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.refs.len() * RECORD_LEN as usize);
        let mut prev = 0u64;
        for r in &self.refs {
            b.extend_from_slice(&r.page.wrapping_sub(prev).to_le_bytes());
            prev = r.page;
        }
        for r in &self.refs {
            b.extend_from_slice(&r.owner_rank.to_le_bytes());
        }
        for r in &self.refs {
            b.extend_from_slice(&r.owner_generation.to_le_bytes());
        }
        for r in &self.refs {
            b.extend_from_slice(&r.owner_page.wrapping_sub(r.page).to_le_bytes());
        }
        b
    }

    /// Encodes the file.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let cols = self.columns();
        let stored = zstd::bulk::compress(&cols, LEVEL)
            .map_err(|e| Error::Invalid(format!("zstd cannot compress an Xref file: {e}")))?;
        let mut b = vec![0u8; HEADER_LEN as usize];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[16..24].copy_from_slice(&self.generation.to_le_bytes());
        b[24..32].copy_from_slice(&(self.refs.len() as u64).to_le_bytes());
        b[32..40].copy_from_slice(&(stored.len() as u64).to_le_bytes());
        let crc = crc32fast::hash(&b[0..56]);
        b[56..60].copy_from_slice(&crc.to_le_bytes());
        b.extend_from_slice(&stored);
        b.extend_from_slice(&crc32fast::hash(&stored).to_le_bytes());
        b.extend_from_slice(&crc32fast::hash(&cols).to_le_bytes());
        Ok(b)
    }

    /// Writes the file durably at `path`; returns its length, CRC-32 and
    /// XXH3-64 ([`digest`](crate::format::manifest::digest)).
    pub fn write(&self, path: &Path) -> Result<(u64, u32, u64)> {
        if !self.refs.windows(2).all(|w| w[0].page < w[1].page) {
            return Err(Error::Invalid(format!(
                "{}: refusing to write cross-rank references that are not ascending by page",
                path.display()
            )));
        }
        let b = self.encode()?;
        durable::write_file(path, &b)?;
        Ok(crate::format::manifest::digest(&b))
    }

    /// Reads and checks `path`, which may hold at most `max_count` records
    /// (the pages of its generation's P-Table delta): more is refused from
    /// the header, before anything is allocated from it.
    pub fn read(path: impl AsRef<Path>, max_count: u64) -> Result<XrefFile> {
        let path = path.as_ref();
        let mut file = super::open_regular(path)?;
        let (len, h) = super::read_header(path, &file)?;
        let le32 = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().expect("4"));
        let le64 = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().expect("8"));
        super::check_prefix(path, &h, &MAGIC, "an Xref file", VERSION)?;
        for off in [12usize, 40, 44, 48, 52, 60] {
            if le32(off) != 0 {
                return Err(Error::corrupt(path, off as u64, "reserved", "must be 0"));
            }
        }
        let (count, stored_len) = (le64(24), le64(32));
        if count > max_count {
            return Err(Error::corrupt(
                path,
                24,
                "count",
                format!("{count} records, but the generation writes {max_count} pages"),
            ));
        }
        if stored_len.checked_add(HEADER_LEN + 8) != Some(len) {
            return Err(Error::corrupt(
                path,
                32,
                "stored_len",
                format!("{stored_len} stored bytes do not match the file length {len}"),
            ));
        }
        // The length matched: the allocation is the file's size.
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
        let (stored, tail) = body.split_at(body.len() - 8);
        let stored_crc = u32::from_le_bytes(tail[0..4].try_into().expect("4"));
        let records_crc = u32::from_le_bytes(tail[4..8].try_into().expect("4"));
        let actual = crc32fast::hash(stored);
        if stored_crc != actual {
            return Err(Error::corrupt(
                path,
                len - 8,
                "stored_crc",
                format!(
                    "stored {stored_crc:#010x}, computed {actual:#010x} over the stored records"
                ),
            ));
        }
        // `count` is bounded by the caller's page count above.
        let want = count as usize * RECORD_LEN as usize;
        let cols = zstd::bulk::decompress(stored, want)
            .map_err(|e| Error::corrupt(path, HEADER_LEN, "records", format!("zstd: {e}")))?;
        if cols.len() != want {
            return Err(Error::corrupt(
                path,
                HEADER_LEN,
                "records",
                format!("{} bytes decoded, {count} records need {want}", cols.len()),
            ));
        }
        let actual = crc32fast::hash(&cols);
        if records_crc != actual {
            return Err(Error::corrupt(
                path,
                len - 4,
                "records_crc",
                format!(
                    "stored {records_crc:#010x}, computed {actual:#010x} over the decoded records"
                ),
            ));
        }
        let n = count as usize;
        // Column offsets: page deltas (8 bytes each), owner ranks (4),
        // owner generations (8), owner page minus page (8).
        let at = [0, 8 * n, 12 * n, 20 * n];
        let col = |k: usize, w: usize, i: usize| &cols[at[k] + i * w..][..w];
        let mut refs: Vec<Xref> = Vec::with_capacity(n);
        let mut prev: Option<u64> = None;
        for i in 0..n {
            let delta = u64::from_le_bytes(col(0, 8, i).try_into().expect("8"));
            let page = match prev {
                None => Some(delta),
                Some(p) => p.checked_add(delta).filter(|_| delta > 0),
            };
            let Some(page) = page else {
                return Err(Error::corrupt(
                    path,
                    HEADER_LEN,
                    "page",
                    format!("record {i}: page is not above the record before it"),
                ));
            };
            prev = Some(page);
            let rel = u64::from_le_bytes(col(3, 8, i).try_into().expect("8"));
            refs.push(Xref {
                page,
                owner_rank: u32::from_le_bytes(col(1, 4, i).try_into().expect("4")),
                owner_generation: u64::from_le_bytes(col(2, 8, i).try_into().expect("8")),
                owner_page: page.wrapping_add(rel),
            });
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

    #[test]
    fn a_run_of_pages_held_at_the_same_numbers_costs_a_few_bytes() {
        let x = XrefFile {
            path: PathBuf::new(),
            generation: 3,
            refs: (0..10_000u64)
                .map(|i| Xref {
                    page: 0x5555_0000 + i,
                    owner_rank: 2,
                    owner_generation: 3,
                    owner_page: 0x5555_0000 + i,
                })
                .collect(),
        };
        let b = x.encode().unwrap();
        assert!(b.len() < 1024, "{} bytes for 10000 references", b.len());
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        std::fs::write(&p, &b).unwrap();
        assert_eq!(XrefFile::read(&p, 10_000).unwrap().refs, x.refs);
    }

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
        let back = XrefFile::read(&p, 2).unwrap();
        assert_eq!(back.refs, x.refs);
        assert_eq!(back.generation, 7);
        let good = std::fs::read(&p).unwrap();
        for i in 0..good.len() {
            let mut b = good.clone();
            b[i] ^= 0x10;
            std::fs::write(&p, &b).unwrap();
            assert!(
                XrefFile::read(&p, 2).is_err(),
                "byte {i} flipped was accepted"
            );
        }
        // A count beyond the generation's pages is refused from the
        // header, before anything is allocated from it.
        let mut b = good.clone();
        b[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
        let crc = crc32fast::hash(&b[0..56]);
        b[56..60].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&p, &b).unwrap();
        let e = XrefFile::read(&p, 1 << 20).unwrap_err().to_string();
        assert!(e.contains("count"), "{e}");
        std::fs::write(&p, &good).unwrap();
        let e = XrefFile::read(&p, 1).unwrap_err().to_string();
        assert!(e.contains("count"), "{e}");
    }

    #[test]
    fn records_out_of_order_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        let mut x = sample();
        x.refs.swap(0, 1);
        assert!(x.write(&p).is_err());
        std::fs::write(&p, x.encode().unwrap()).unwrap();
        let e = XrefFile::read(&p, 2).unwrap_err().to_string();
        assert!(e.contains("not above"), "{e}");
    }
}
