//! The generation manifest (docs/FORMAT.md §3.4): framing, CRC line, JSON
//! and the consistency checks. A manifest that decodes re-encodes to a
//! manifest that decodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rexctl::format::manifest::Manifest;

fuzz_target!(|data: &[u8]| {
    let path = std::path::Path::new("fuzz.manifest");
    if let Ok(m) = Manifest::decode(path, data) {
        let again = Manifest::decode(path, &m.encode()).expect("a re-encoded manifest decodes");
        assert_eq!(again.generation, m.generation);
        assert_eq!(again.files, m.files);
        assert_eq!(again.chain_id, m.chain_id);
    }
});
