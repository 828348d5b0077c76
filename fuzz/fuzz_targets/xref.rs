//! The Xref file reader (docs/FORMAT.md §3.9.2), and its encoding: a file
//! that reads back encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rexctl::format::xref::XrefFile;

mod common;

fuzz_target!(|data: &[u8]| {
    let path = common::scratch(data, "xref");
    if let Ok(x) = XrefFile::read(&path) {
        assert_eq!(x.encode(), data, "a valid Xref file re-encodes to its bytes");
    }
});
