//! A bare `TPMT_PUBLIC` (`tpm::Public::parse`): what parses re-encodes to
//! exactly its bytes (so it has one name), and as an AK certifying itself it
//! is refused with a code.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let verdict = bcd_fuzz::verdict("tpm-public", data);
    assert!(verdict.starts_with("refuse: "), "{verdict}");
    let Ok(public) = pki::tpm::Public::parse(data, "public") else { return };
    assert_eq!(public.to_bytes(), data);
});
