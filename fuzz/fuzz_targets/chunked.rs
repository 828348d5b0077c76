//! The chunked container of RPS files and Pointer Files (docs/FORMAT.md
//! §3.2.2), as either kind: open, verify every chunk, read every record.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rexctl::format::chunked::{ChunkedFile, Kind};

mod common;

fuzz_target!(|data: &[u8]| {
    let path = common::scratch(data, "rps");
    for kind in [Kind::Rps, Kind::Pf] {
        if let Ok(f) = ChunkedFile::open(&path, kind) {
            // A version 2 file decodes into memory of its payload's size,
            // which a few bytes of zstd can claim by the gigabyte (a real
            // reader's payload is bounded by the manifest's pattern count
            // before it is opened, §3.4.5): past 64 MiB, only a sample of
            // records is read (four chunks of at most 16 MiB), not every
            // chunk.
            let payload = f.len().saturating_mul(u64::from(f.header().record_size));
            let whole = payload <= 64 << 20;
            let verified = whole && f.verify_all().is_ok();
            // A sample of records across the file, and past its end.
            let n = f.len();
            let step = (n / if whole { 256 } else { 4 }).max(1);
            for i in (0..n.saturating_add(2)).step_by(step as usize) {
                let r = f.record(i);
                assert!(
                    i >= n || !verified || r.is_ok(),
                    "record {i} of a verified file failed"
                );
                assert!(
                    i < n || r.is_err(),
                    "record {i} past the end was handed out"
                );
            }
            if whole {
                let _ = f.payload();
            }
        }
    }
});
