// Pins and JWK thumbprints (docs/formats.md, "Pins and key ids"): pin(key) =
// "sha256:" + base64url_nopad(SHA-256(SPKI DER)), the same string as the
// DSSE keyid and the JOSE kid; JWKs with members in RFC 7638 order.

package pki

import (
	"crypto/ecdsa"
	"crypto/sha256"
)

// PinSPKI returns the pin of a SubjectPublicKeyInfo DER.
func PinSPKI(spkiDER []byte) string {
	sum := sha256.Sum256(spkiDER)
	return "sha256:" + encodeURL(sum[:])
}

// JWK returns the public JWK of a P-256 key with members in RFC 7638 order
// (crv, kid, kty, x, y), with kid only when it is not empty. The bytes equal
// the Rust side's pki::pin::p256_jwk.
func JWK(pub *ecdsa.PublicKey, kid string) string {
	x, y := coordinates(pub)
	out := []byte(`{"crv":"P-256",`)
	if kid != "" {
		out = append(out, `"kid":`...)
		out = appendJSONString(out, kid)
		out = append(out, ',')
	}
	out = append(out, `"kty":"EC","x":"`...)
	out = append(out, x...)
	out = append(out, `","y":"`...)
	out = append(out, y...)
	out = append(out, `"}`...)
	return string(out)
}

// JWKThumbprint returns the RFC 7638 thumbprint of a P-256 key: base64url of
// the SHA-256 of its JWK without kid.
func JWKThumbprint(pub *ecdsa.PublicKey) string {
	sum := sha256.Sum256([]byte(JWK(pub, "")))
	return encodeURL(sum[:])
}

// coordinates returns the base64url x and y of a P-256 key, 32 bytes each.
func coordinates(pub *ecdsa.PublicKey) (x, y string) {
	point, err := pub.Bytes()
	if err != nil || len(point) != 65 {
		// A P-256 *ecdsa.PublicKey always encodes as 65 bytes; anything else is
		// a programming error, not an input.
		panic("pki: not a valid P-256 public key")
	}
	return encodeURL(point[1:33]), encodeURL(point[33:])
}
