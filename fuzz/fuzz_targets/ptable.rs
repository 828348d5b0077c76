//! P-Table delta reader (docs/FORMAT.md §3.3.2), and its encoding: a delta
//! that reads back encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rexctl::format::ptable::PTableDelta;

mod common;

fuzz_target!(|data: &[u8]| {
    let path = common::scratch(data, "ptab");
    if let Ok(d) = PTableDelta::read(&path) {
        assert_eq!(
            d.encode(),
            data,
            "a valid P-Table delta re-encodes to its bytes"
        );
    }
});
