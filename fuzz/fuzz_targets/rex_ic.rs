//! REX-IC reader (docs/FORMAT.md §2.8): the metadata read, the mapped open,
//! a full verification and every page handed out. Nothing may panic or
//! abort, and memory stays within libFuzzer's limit whatever the header
//! claims.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rexctl::format::ic::{IcFile, IcMeta};

mod common;

fuzz_target!(|data: &[u8]| {
    let path = common::scratch(data, "rexic");
    let meta = IcMeta::read(&path);
    if let Ok(f) = IcFile::open(&path) {
        // The mapped open agrees with the metadata-only read.
        let m = meta.expect("IcFile::open succeeded where IcMeta::read failed");
        assert_eq!(m.pages, f.meta().pages);
        assert_eq!(m.chain_id, f.meta().chain_id);
        let _ = f.verify();
        for pp in 0..f.meta().page_count() {
            let _ = f.page(pp);
        }
    }
});
