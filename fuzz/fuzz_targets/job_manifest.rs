//! The job manifest of an MPI job (docs/FORMAT.md §3.9.3): framing, CRC
//! line, JSON and the checks. A job manifest that decodes re-encodes to one
//! that decodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rexctl::format::job_manifest::JobManifest;

fuzz_target!(|data: &[u8]| {
    let path = std::path::Path::new("fuzz.job");
    if let Ok(m) = JobManifest::decode(path, data) {
        let again = JobManifest::decode(path, &m.encode()).expect("a re-encoded job manifest decodes");
        assert_eq!(again, m);
    }
});
