//! A PKCS#10 CSR (`pki::x509::parse_csr`), what the Join path parses before
//! anything is authenticated: what parses has a self-signature that verifies
//! over exactly the CertificationRequestInfo bytes it arrived with, and its
//! key re-encodes to exactly the SPKI it came from (so its pin is that of the
//! bytes); a refusal is `csr-malformed` or `csr-signature`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use p256::pkcs8::EncodePublicKey as _;

fuzz_target!(|data: &[u8]| {
    let verdict = bcd_fuzz::verdict("csr", data);
    let csr = match pki::x509::parse_csr(data) {
        Ok(csr) => csr,
        Err(e) => {
            assert!(matches!(e.code(), "csr-malformed" | "csr-signature"), "{e}");
            assert_eq!(verdict, format!("refuse: {}", e.code()));
            return;
        }
    };
    assert_eq!(verdict, "accept");
    let (info, sig) = bcd_fuzz::signed_parts(data).expect("a CSR that parses is a signed SEQUENCE");
    let info_tlv = bcd_fuzz::tlv(info).expect("the CertificationRequestInfo");
    let fields = bcd_fuzz::elements(info_tlv.contents).expect("its fields");
    let spki = fields.get(2).expect("version, subject, subjectPKInfo");
    assert_eq!(csr.spki_der, *spki, "the SPKI is the one of the input");
    assert_eq!(csr.public_key.to_public_key_der().unwrap().as_bytes(), *spki, "the key re-encodes to its SPKI");
    assert_eq!(csr.pin, pki::pin::pin(spki));
    assert!(bcd_fuzz::ecdsa_verifies(&csr.public_key, info, sig), "the self-signature is over the input's bytes");
});
