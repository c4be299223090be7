// The JWE profile (docs/formats.md, "The JWE profile"): compact JWE, alg ECDH-ES+A256KW, enc
// A256GCM, P-256, kid the recipient's pin, no apu/apv. go-jose seals and
// decrypts; the header, kid, epk and size checks are ours, in the order of
// the Rust side's pki/src/jwe.rs, so that the same defect gets the same code:
// five base64url parts and a JSON header (jwe-malformed), the profile
// (jwe-header), the kid (jwe-kid), the ephemeral key (jwe-epk), the part
// sizes (jwe-malformed), then unwrap and decryption (jwe-decrypt).

package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"strings"

	jose "github.com/go-jose/go-jose/v4"
)

// The algorithms of the JWE profile.
const (
	// JWEAlg is the key-management algorithm.
	JWEAlg = "ECDH-ES+A256KW"
	// JWEEnc is the content-encryption algorithm.
	JWEEnc = "A256GCM"
)

// SealJWE seals plaintext to recipient (a P-256 key) as a compact JWE of the
// profile, with kid the recipient's pin. The ephemeral key, content key and
// IV come from crypto/rand, so every call gives another string.
func SealJWE(recipient *ecdsa.PublicKey, plaintext []byte) (string, error) {
	pub, err := NewPublicKey(recipient)
	if err != nil {
		return "", err
	}
	enc, err := jose.NewEncrypter(jose.A256GCM, jose.Recipient{
		Algorithm: jose.ECDH_ES_A256KW,
		Key:       recipient,
		KeyID:     pub.Pin(),
	}, nil)
	if err != nil {
		return "", err
	}
	obj, err := enc.Encrypt(plaintext)
	if err != nil {
		return "", err
	}
	return obj.CompactSerialize()
}

// OpenJWE opens a compact JWE sealed to recipient, whose pin must be the
// header's kid.
func OpenJWE(recipient *ecdsa.PrivateKey, compact string) ([]byte, error) {
	pub, err := NewPublicKey(&recipient.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := checkJWE(compact, pub.Pin()); err != nil {
		return nil, err
	}
	obj, err := jose.ParseEncryptedCompact(compact,
		[]jose.KeyAlgorithm{jose.ECDH_ES_A256KW}, []jose.ContentEncryption{jose.A256GCM})
	if err != nil {
		return nil, refuseWith(CodeJWEDecrypt, err, "go-jose refused the JWE")
	}
	plaintext, err := obj.Decrypt(recipient)
	if err != nil {
		return nil, refuseWith(CodeJWEDecrypt, err, "JWE decryption failed")
	}
	return plaintext, nil
}

// jweHeader is the protected header as the Rust side reads it: every member
// optional ("" when absent or null), unknown members ignored.
type jweHeader struct {
	alg, enc, kid string
	// forbidden is the first of apu, apv, zip and crit that is present.
	forbidden string
	// epk is the ephemeral key, nil when absent.
	epk *jweEPK
}

// jweEPK is the header's ephemeral public JWK, every member optional.
type jweEPK struct{ kty, crv, x, y string }

// checkJWE runs every check before decryption, in the Rust order.
func checkJWE(compact, kid string) error {
	parts := strings.Split(compact, ".")
	if len(parts) != 5 {
		return refuse(CodeJWEMalformed, "not five parts")
	}
	raw := make([][]byte, len(parts))
	for i, p := range parts {
		b, err := decodeURL(p)
		if err != nil {
			return refuse(CodeJWEMalformed, "a part is not base64url")
		}
		raw[i] = b
	}
	h, err := parseJWEHeader(raw[0])
	if err != nil {
		return refuseWith(CodeJWEMalformed, err, "the header is not JSON")
	}

	switch {
	case h.alg != JWEAlg:
		return refuse(CodeJWEHeader, "alg")
	case h.enc != JWEEnc:
		return refuse(CodeJWEHeader, "enc")
	case h.forbidden != "":
		return refuse(CodeJWEHeader, "%s", h.forbidden)
	}
	if h.kid != kid {
		return refuse(CodeJWEKid, "kid %q, expected %q", h.kid, kid)
	}
	if err := checkEPK(h.epk); err != nil {
		return err
	}
	if len(raw[1]) != 40 || len(raw[2]) != 12 || len(raw[4]) != 16 {
		return refuse(CodeJWEMalformed, "a part has the wrong size")
	}
	return nil
}

func parseJWEHeader(data []byte) (*jweHeader, error) {
	forbidden := []string{"apu", "apv", "zip", "crit"}
	obj, err := parseObject(data, false, append([]string{"alg", "enc", "kid", "epk"}, forbidden...)...)
	if err != nil {
		return nil, err
	}
	h := &jweHeader{}
	for _, name := range forbidden {
		if obj.present(name) && h.forbidden == "" {
			h.forbidden = name
		}
	}
	if err := obj.optionalStrings(map[string]*string{"alg": &h.alg, "enc": &h.enc, "kid": &h.kid}); err != nil {
		return nil, err
	}
	if !obj.present("epk") {
		return h, nil
	}
	epk, err := parseObject(obj["epk"], false, "kty", "crv", "x", "y")
	if err != nil {
		return nil, err
	}
	h.epk = &jweEPK{}
	err = epk.optionalStrings(map[string]*string{"kty": &h.epk.kty, "crv": &h.epk.crv, "x": &h.epk.x, "y": &h.epk.y})
	return h, err
}

// checkEPK checks that the ephemeral key is a P-256 point.
func checkEPK(epk *jweEPK) error {
	if epk == nil {
		return refuse(CodeJWEEPK, "missing")
	}
	if epk.kty != "EC" || epk.crv != "P-256" {
		return refuse(CodeJWEEPK, "not an EC P-256 key")
	}
	point := []byte{4}
	for _, coordinate := range []string{epk.x, epk.y} {
		b, err := decodeURL(coordinate)
		if err != nil || len(b) != 32 {
			return refuse(CodeJWEEPK, "a coordinate is not 32 bytes")
		}
		point = append(point, b...)
	}
	if _, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), point); err != nil {
		return refuseWith(CodeJWEEPK, err, "not a point on P-256")
	}
	return nil
}
