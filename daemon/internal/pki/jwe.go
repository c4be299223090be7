// The JWE profile (docs/formats.md, "The JWE profile"): compact JWE, alg ECDH-ES+A256KW, enc
// A256GCM, P-256, kid the recipient's pin, no apu/apv. go-jose seals (and is
// the oracle of the tests); opening is ours, in the order of the Rust side's
// pki/src/jwe.rs, so that the same defect gets the same code: five base64url
// parts and a JSON header (jwe-malformed), the profile (jwe-header), the kid
// (jwe-kid), the ephemeral key (jwe-epk), the part sizes (jwe-malformed),
// then unwrap and decryption (jwe-decrypt). Each primitive has its entry
// point, the one opening goes through and the Wycheproof vectors test
// (TestWycheproof): agreeP256 (ECDH), unwrapKey (AES key wrap) and
// decryptContent (AES-GCM), as jwe::agree, unwrap_key and decrypt_content.

package pki

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/binary"
	"strings"

	jose "github.com/go-jose/go-jose/v4"
	josecipher "github.com/go-jose/go-jose/v4/cipher"
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
	epk, raw, err := checkJWE(compact, pub.Pin())
	if err != nil {
		return nil, err
	}
	priv, err := recipient.ECDH()
	if err != nil {
		return nil, refuseWith(CodeJWEDecrypt, err, "the recipient key is not an ECDH key")
	}
	z, err := agreeP256(priv, epk)
	if err != nil {
		return nil, err
	}
	cek, err := unwrapKey(concatKDF(z), raw[1])
	if err != nil {
		return nil, err
	}
	protected := compact[:strings.IndexByte(compact, '.')]
	return decryptContent(cek, raw[2], raw[3], raw[4], []byte(protected))
}

// concatKDF is the Concat KDF of RFC 7518, 4.6.2, for ECDH-ES+A256KW with
// empty apu and apv: one SHA-256 block.
func concatKDF(z []byte) []byte {
	h := sha256.New()
	h.Write([]byte{0, 0, 0, 1})
	h.Write(z)
	h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(JWEAlg))))
	h.Write([]byte(JWEAlg))
	h.Write(make([]byte, 8))    // PartyUInfo and PartyVInfo, empty
	h.Write([]byte{0, 0, 1, 0}) // SuppPubInfo: 256 bits
	return h.Sum(nil)
}

// agreeP256 is ECDH on P-256 with the sender's ephemeral key, an
// uncompressed point (04 ‖ x ‖ y): the shared secret Z, or jwe-epk when the
// point is not on the curve.
func agreeP256(recipient *ecdh.PrivateKey, point []byte) ([]byte, error) {
	if len(point) != 65 || point[0] != 4 {
		return nil, refuse(CodeJWEEPK, "not an uncompressed point")
	}
	epk, err := ecdh.P256().NewPublicKey(point)
	if err != nil {
		return nil, refuseWith(CodeJWEEPK, err, "not a point on P-256")
	}
	z, err := recipient.ECDH(epk)
	if err != nil {
		return nil, refuseWith(CodeJWEEPK, err, "no shared secret")
	}
	return z, nil
}

// unwrapKey is AES-256 key unwrap (RFC 3394) of the 40-byte encrypted key
// into the content key: jwe-malformed for other sizes, jwe-decrypt when the
// integrity check fails.
func unwrapKey(kek, wrapped []byte) ([]byte, error) {
	if len(kek) != 32 || len(wrapped) != 40 {
		return nil, refuse(CodeJWEMalformed, "a KEK of %d bytes or an encrypted key of %d", len(kek), len(wrapped))
	}
	block, err := aes.NewCipher(kek)
	if err != nil {
		return nil, refuseWith(CodeJWEMalformed, err, "the KEK")
	}
	cek, err := josecipher.KeyUnwrap(block, wrapped)
	if err != nil {
		return nil, refuse(CodeJWEDecrypt, "JWE decryption failed")
	}
	return cek, nil
}

// decryptContent is A256GCM decryption: a 32-byte key, a 12-byte IV and a
// 16-byte tag (jwe-malformed otherwise), jwe-decrypt when the tag does not
// verify.
func decryptContent(cek, iv, ciphertext, tag, aad []byte) ([]byte, error) {
	if len(cek) != 32 || len(iv) != 12 || len(tag) != 16 {
		return nil, refuse(CodeJWEMalformed, "a key, IV or tag of the wrong size")
	}
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, refuseWith(CodeJWEMalformed, err, "the content key")
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, refuseWith(CodeJWEMalformed, err, "AES-GCM")
	}
	plaintext, err := gcm.Open(nil, iv, append(bytes.Clone(ciphertext), tag...), aad)
	if err != nil {
		return nil, refuse(CodeJWEDecrypt, "JWE decryption failed")
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

// checkJWE runs every check before decryption, in the Rust order, and
// returns the ephemeral key's point and the decoded parts.
func checkJWE(compact, kid string) ([]byte, [][]byte, error) {
	parts := strings.Split(compact, ".")
	if len(parts) != 5 {
		return nil, nil, refuse(CodeJWEMalformed, "not five parts")
	}
	raw := make([][]byte, len(parts))
	for i, p := range parts {
		b, err := decodeURL(p)
		if err != nil {
			return nil, nil, refuse(CodeJWEMalformed, "a part is not base64url")
		}
		raw[i] = b
	}
	h, err := parseJWEHeader(raw[0])
	if err != nil {
		return nil, nil, refuseWith(CodeJWEMalformed, err, "the header is not JSON")
	}

	switch {
	case h.alg != JWEAlg:
		return nil, nil, refuse(CodeJWEHeader, "alg")
	case h.enc != JWEEnc:
		return nil, nil, refuse(CodeJWEHeader, "enc")
	case h.forbidden != "":
		return nil, nil, refuse(CodeJWEHeader, "%s", h.forbidden)
	}
	if h.kid != kid {
		return nil, nil, refuse(CodeJWEKid, "kid %q, expected %q", h.kid, kid)
	}
	epk, err := checkEPK(h.epk)
	if err != nil {
		return nil, nil, err
	}
	if len(raw[1]) != 40 || len(raw[2]) != 12 || len(raw[4]) != 16 {
		return nil, nil, refuse(CodeJWEMalformed, "a part has the wrong size")
	}
	return epk, raw, nil
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

// checkEPK checks that the ephemeral key is a P-256 point and returns it
// uncompressed.
func checkEPK(epk *jweEPK) ([]byte, error) {
	if epk == nil {
		return nil, refuse(CodeJWEEPK, "missing")
	}
	if epk.kty != "EC" || epk.crv != "P-256" {
		return nil, refuse(CodeJWEEPK, "not an EC P-256 key")
	}
	point := []byte{4}
	for _, coordinate := range []string{epk.x, epk.y} {
		b, err := decodeURL(coordinate)
		if err != nil || len(b) != 32 {
			return nil, refuse(CodeJWEEPK, "a coordinate is not 32 bytes")
		}
		point = append(point, b...)
	}
	if _, err := ecdh.P256().NewPublicKey(point); err != nil {
		return nil, refuseWith(CodeJWEEPK, err, "not a point on P-256")
	}
	return point, nil
}
