//! A certificate, described (`pki::x509::describe_der`) and verified against
//! the fixtures' node CA (`pki::x509::verify_issued`, `verify_for` a client),
//! as the gateway is shown one: what verifies is signed by the CA over
//! exactly the TBSCertificate bytes it arrived with, names the CA as its
//! issuer, is valid at the fixture time, and says what `describe_der` says
//! of it (the same common name, serial, names and key); refusals are
//! `cert-malformed`, `cert-chain` or `cert-validity`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use p256::pkcs8::DecodePublicKey as _;

fuzz_target!(|data: &[u8]| {
    let ca = bcd_fuzz::node_ca();
    let described = pki::x509::describe_der(data);
    if let Err(e) = &described {
        assert_eq!(e.code(), "cert-malformed", "{e}");
    }
    let verdict = bcd_fuzz::verdict("certificate", data);
    let verified = match pki::x509::verify_issued(data, ca, bcd_fuzz::AS_OF_MS) {
        Ok(v) => v,
        Err(e) => {
            assert!(matches!(e.code(), "cert-malformed" | "cert-chain" | "cert-validity"), "{e}");
            assert_ne!(verdict, "accept", "verify_for accepted what verify_issued refused");
            return;
        }
    };
    let described = described.expect("what verifies describes");
    assert_eq!(
        (&verified.common_name, &verified.serial),
        (&described.common_name, &described.serial),
        "verified and described disagree"
    );
    assert_eq!(verified, described);
    let v = verified.validity;
    assert!(v.not_before_ms <= bcd_fuzz::AS_OF_MS && bcd_fuzz::AS_OF_MS <= v.not_after_ms);
    // Independently of pki: the issuer field is the CA's subject, byte for byte,
    // and the CA's key signed exactly the TBSCertificate of the input.
    let fields = |der: &[u8]| {
        let (tbs, _) = bcd_fuzz::signed_parts(der).expect("a signed SEQUENCE");
        let fields = bcd_fuzz::elements(bcd_fuzz::tlv(tbs).expect("the TBSCertificate").contents).expect("its fields");
        let skip = usize::from(fields.first().is_some_and(|f| f[0] == 0xa0));
        fields[skip..].iter().map(|f| f.to_vec()).collect::<Vec<_>>()
    };
    let (leaf, issuer) = (fields(data), fields(ca));
    // serial, signature, issuer, validity, subject, subjectPublicKeyInfo
    assert_eq!(leaf[2], issuer[4], "the issuer field is the CA's subject");
    let ca_key = p256::PublicKey::from_public_key_der(&issuer[5]).expect("the CA key");
    let (tbs, sig) = bcd_fuzz::signed_parts(data).expect("a signed SEQUENCE");
    assert!(bcd_fuzz::ecdsa_verifies(&ca_key, tbs, sig), "the CA signed the input's TBSCertificate");
    if verdict == "accept" {
        assert!(!verified.is_ca && verified.client_auth, "a client certificate");
    }
});
