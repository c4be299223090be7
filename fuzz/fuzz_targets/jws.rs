//! The JWS compact form, as an exec ticket: what verifies is a console
//! ticket of our issuer for our node.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let issuer = [pki::keys::p256(bcd_fuzz::SEED, "tunnels-issuer").public_key()];
    if let Ok(t) =
        pki::jws::verify_exec_ticket(text, &issuer, bcd_fuzz::TUNNELS_ISSUER, bcd_fuzz::NODE, bcd_fuzz::AS_OF_MS)
    {
        assert_eq!(
            (t.iss.as_str(), t.aud.as_str(), t.op.as_str()),
            (bcd_fuzz::TUNNELS_ISSUER, "bcd:node_0", "console")
        );
    }
});
