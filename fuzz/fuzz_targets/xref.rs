//! The Xref file reader (docs/FORMAT.md §3.9.2), and its encoding: a file
//! that reads back re-encodes to a file that reads back to the same
//! references (zstd may code the same records in other bytes).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rexctl::format::xref::XrefFile;

mod common;

fuzz_target!(|data: &[u8]| {
    let path = common::scratch(data, "xref");
    if let Ok(x) = XrefFile::read(&path, 1 << 20) {
        let again = common::scratch(&x.encode().expect("encodes"), "xref2");
        let back = XrefFile::read(&again, 1 << 20).expect("a re-encoded Xref file reads");
        assert_eq!(back.refs, x.refs);
    }
});
