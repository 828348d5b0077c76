//! P-Table delta reader (docs/FORMAT.md §3.3.3), and its encoding: what it
//! accepts keeps the format's rules, and a delta that reads back encodes to
//! a file that reads back to the same delta,
//! byte for byte the same file in version 1 (version 2 readers accept
//! numbers in longer forms than the writer's shortest).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rexctl::format::ptable::PTableDelta;

mod common;

fuzz_target!(|data: &[u8]| {
    let path = common::scratch(data, "ptab");
    if let Ok(d) = PTableDelta::read(&path) {
        // What the reader accepts keeps the format's rules: an index
        // strictly ascending, drop ranges ascending and apart from it.
        if let Err(e) = rexctl::format::ic::check_index(&d.pages, &d.drops) {
            panic!("an accepted P-Table delta breaks the rules: {e}");
        }
        assert_eq!(d.pages.len(), d.page_crcs.len());
        let version = u32::from_le_bytes(data[8..12].try_into().expect("a header"));
        let again = d.encode_version(version);
        if version == 1 {
            assert_eq!(again, data, "a valid version 1 delta re-encodes to its bytes");
        }
        let back = PTableDelta::read(common::scratch(&again, "ptab2"))
            .expect("a re-encoded delta reads back");
        assert_eq!(
            PTableDelta {
                path: d.path.clone(),
                ..back
            },
            d,
            "a re-encoded delta reads back to the same delta"
        );
    }
});
