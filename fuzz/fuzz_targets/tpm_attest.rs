//! A `TPMS_ATTEST` and a `TPMT_SIGNATURE`: what parses re-encodes to exactly
//! its bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pki::tpm::attest::{Attest, EcdsaSignature};

fuzz_target!(|data: &[u8]| {
    if let Ok(attest) = Attest::parse(data, "attest") {
        assert_eq!(attest.to_bytes(), data);
    }
    if let Some(sig) = EcdsaSignature::parse(data) {
        assert_eq!(sig.to_bytes(), data);
    }
});
