//! The JWE compact form, as a sealed join token: it opens only for the CSR it
//! is presented with, and what opens re-reads as the same payload.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let key = pki::keys::p256(bcd_fuzz::SEED, "join-encryption");
    if let Ok(payload) = pki::join::open_token(&key, text, &bcd_fuzz::csr_pin(), bcd_fuzz::AS_OF_MS) {
        assert_eq!(payload.csr, bcd_fuzz::csr_pin());
    }
});
