//! A `POST /v1/renew` body (and a `Gateway.Renew` request) as the gateway
//! reads it (`devstack/src/gateway/renew.rs`): a RenewRequest decoded with
//! prost re-encodes to one equal to it; its CSR goes through `parse_csr`,
//! refused with `csr-malformed` or `csr-signature`; its TPM certification
//! through `verify_key_certification` (with the certification's own key
//! public as the AK, the one public every input holds), refused with one of
//! the renewal's certification codes (`tpm-malformed`, `certify-signature`,
//! `certify-nonce`, `certify-name`, `node-key-attributes`), and what
//! verifies is exactly that public's P-256 key.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pki::tpm::attestor::{CertifiedKey, Signed, verify_key_certification};
use pki::tpm::public::Public;
use prost::Message as _;
use sha2::{Digest, Sha256};

fuzz_target!(|data: &[u8]| {
    let Ok(request) = proto::RenewRequest::decode(data) else { return };
    let again = proto::RenewRequest::decode(request.encode_to_vec().as_slice()).expect("our own encoding decodes");
    assert_eq!(again, request);
    if let Err(e) = pki::x509::parse_csr(&request.csr_der) {
        assert!(matches!(e.code(), "csr-malformed" | "csr-signature"), "a CSR refused with {}", e.code());
    }
    if let Some(k) = &request.node_key {
        let nonce: [u8; 32] = Sha256::digest(&request.csr_der).into();
        let certified = CertifiedKey {
            public: k.public.clone(),
            certify: Signed { attest: k.attest.clone(), signature: k.signature.clone() },
        };
        match verify_key_certification(&k.public, &nonce, &certified) {
            Ok(key) => {
                let public = Public::parse(&k.public, "node key public").expect("a verified key's public parses");
                assert_eq!(public.p256(), Some(key), "the verified key is not the certified public's");
            }
            Err(e) => assert!(
                matches!(
                    e.code(),
                    "tpm-malformed" | "certify-signature" | "certify-nonce" | "certify-name" | "node-key-attributes"
                ),
                "a certification refused with {}",
                e.code()
            ),
        }
    }
});
