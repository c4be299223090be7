//! Pins and JWK thumbprints (docs/formats.md, "Pins and key ids").
//!
//! `pin(key) = "sha256:" + base64url_nopad(SHA-256(SPKI DER))`; the same string
//! is the DSSE keyid and the JOSE kid.

use sha2::{Digest, Sha256};

use crate::b64;

/// The pin of a SubjectPublicKeyInfo DER.
pub fn pin(spki_der: &[u8]) -> String {
    format!("sha256:{}", b64::url(&Sha256::digest(spki_der)))
}

/// The public JWK of a P-256 key, members in RFC 7638 order
/// (`crv`, `kty`, `x`, `y`), optionally with its `kid`.
pub fn p256_jwk(key: &p256::PublicKey, kid: Option<&str>) -> String {
    let (x, y) = xy(key);
    match kid {
        Some(kid) => format!(r#"{{"crv":"P-256","kid":"{kid}","kty":"EC","x":"{x}","y":"{y}"}}"#),
        None => format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#),
    }
}

/// The RFC 7638 thumbprint of a P-256 key (base64url of SHA-256).
pub fn jwk_thumbprint(key: &p256::PublicKey) -> String {
    b64::url(&Sha256::digest(p256_jwk(key, None).as_bytes()))
}

/// The base64url x and y coordinates of a P-256 key.
pub(crate) fn xy(key: &p256::PublicKey) -> (String, String) {
    use p256::elliptic_curve::sec1::ToSec1Point;
    let point = key.to_sec1_point(false);
    (
        b64::url(point.x().expect("an uncompressed point has x")),
        b64::url(point.y().expect("an uncompressed point has y")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_has_the_documented_shape() {
        let p = pin(b"spki");
        assert!(p.starts_with("sha256:"));
        assert_eq!(p.len(), "sha256:".len() + 43);
    }
}
