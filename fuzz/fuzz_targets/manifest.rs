//! The release manifest (`release::parse_manifest`): what parses serializes
//! to JSON that parses to the same manifest.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(m) = pki::release::parse_manifest(data) else { return };
    let json = serde_json::to_vec(&m).expect("a manifest serializes");
    assert_eq!(pki::release::parse_manifest(&json).expect("our own JSON parses"), m);
});
