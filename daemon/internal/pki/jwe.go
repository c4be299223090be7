// The JWE profile (DESIGN.md §3.5): compact JWE, alg ECDH-ES+A256KW, enc
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
// optional, unknown members ignored.
type jweHeader struct {
	alg, enc, kid        string
	apu, apv, zip, crit  bool
	epk                  bool
	kty, crv, epkX, epkY string
	hasEPKX, hasEPKY     bool
}

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
	case h.apu:
		return refuse(CodeJWEHeader, "apu")
	case h.apv:
		return refuse(CodeJWEHeader, "apv")
	case h.zip:
		return refuse(CodeJWEHeader, "zip")
	case h.crit:
		return refuse(CodeJWEHeader, "crit")
	}
	if h.kid != kid {
		return refuse(CodeJWEKid, "kid %q, expected %q", h.kid, kid)
	}
	if err := checkEPK(h); err != nil {
		return err
	}
	if len(raw[1]) != 40 || len(raw[2]) != 12 || len(raw[4]) != 16 {
		return refuse(CodeJWEMalformed, "a part has the wrong size")
	}
	return nil
}

func parseJWEHeader(data []byte) (*jweHeader, error) {
	obj, err := parseObject(data, false, "alg", "enc", "kid", "epk", "apu", "apv", "zip", "crit")
	if err != nil {
		return nil, err
	}
	h := &jweHeader{
		apu:  obj.present("apu"),
		apv:  obj.present("apv"),
		zip:  obj.present("zip"),
		crit: obj.present("crit"),
		epk:  obj.present("epk"),
	}
	for _, m := range []struct {
		name string
		dst  *string
	}{{"alg", &h.alg}, {"enc", &h.enc}, {"kid", &h.kid}} {
		if *m.dst, err = obj.optionalString(m.name); err != nil {
			return nil, err
		}
	}
	if !h.epk {
		return h, nil
	}
	epk, err := parseObject(obj["epk"], false, "kty", "crv", "x", "y")
	if err != nil {
		return nil, err
	}
	for _, m := range []struct {
		name string
		dst  *string
	}{{"kty", &h.kty}, {"crv", &h.crv}, {"x", &h.epkX}, {"y", &h.epkY}} {
		if *m.dst, err = epk.optionalString(m.name); err != nil {
			return nil, err
		}
	}
	h.hasEPKX, h.hasEPKY = epk.present("x"), epk.present("y")
	return h, nil
}

// checkEPK checks that the ephemeral key is a P-256 point.
func checkEPK(h *jweHeader) error {
	if !h.epk {
		return refuse(CodeJWEEPK, "missing")
	}
	if h.kty != "EC" || h.crv != "P-256" {
		return refuse(CodeJWEEPK, "not an EC P-256 key")
	}
	point := []byte{4}
	for _, c := range []struct {
		value   string
		present bool
	}{{h.epkX, h.hasEPKX}, {h.epkY, h.hasEPKY}} {
		b, err := decodeURL(c.value)
		if !c.present || err != nil || len(b) != 32 {
			return refuse(CodeJWEEPK, "a coordinate is not 32 bytes")
		}
		point = append(point, b...)
	}
	if _, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), point); err != nil {
		return refuseWith(CodeJWEEPK, err, "not a point on P-256")
	}
	return nil
}
