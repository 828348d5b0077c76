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
            let verified = f.verify_all().is_ok();
            // A sample of records across the file, and past its end.
            let n = f.len();
            let step = (n / 256).max(1);
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
            let _ = f.payload();
        }
    }
});
