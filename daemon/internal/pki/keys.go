// Seeded key derivation (docs/formats.md, "Seeds and key derivation"), public keys as the protocol
// exchanges them (Ed25519 or ECDSA P-256, with their SPKI and pin), and
// signing with any crypto.Signer.

package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strconv"

	"bcd/internal/proto/agentv1"
)

// Salt is the HKDF salt of every seeded key.
const Salt = "bc-fixtures/v1"

// OKM returns HKDF-SHA256(ikm = seed, salt = Salt, info = label, L = 32).
func OKM(seed, label string) [32]byte {
	out, err := hkdfSHA256([]byte(seed), []byte(Salt), label, 32)
	if err != nil {
		// 32 bytes is far below HKDF-SHA256's limit of 255*32.
		panic("pki: HKDF-SHA256 refused a 32-byte output: " + err.Error())
	}
	var okm [32]byte
	copy(okm[:], out)
	return okm
}

// hkdfSHA256 is HKDF-SHA256 (RFC 5869): n bytes from ikm, salt and info,
// refused above 255 × 32 bytes; the Rust side's pki::keys::hkdf_sha256.
func hkdfSHA256(ikm, salt []byte, info string, n int) ([]byte, error) {
	return hkdf.Key(sha256.New, ikm, salt, info, n)
}

// DeriveEd25519 returns the Ed25519 key of label: OKM is its secret seed.
func DeriveEd25519(seed, label string) ed25519.PrivateKey {
	okm := OKM(seed, label)
	return ed25519.NewKeyFromSeed(okm[:])
}

// DeriveP256 returns the P-256 key of label: OKM as a big-endian scalar,
// derived again with label#1, label#2, … while it is 0 or not below n.
func DeriveP256(seed, label string) *ecdsa.PrivateKey {
	return p256FromOKM(label, func(info string) [32]byte { return OKM(seed, info) })
}

// p256FromOKM is DeriveP256 over any OKM function (so tests can force the
// out-of-range path, which HKDF hits with probability about 2^-32).
func p256FromOKM(label string, okm func(info string) [32]byte) *ecdsa.PrivateKey {
	for attempt := 0; ; attempt++ {
		info := label
		if attempt > 0 {
			info = label + "#" + strconv.Itoa(attempt)
		}
		scalar := okm(info)
		if key, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), scalar[:]); err == nil {
			return key
		}
	}
}

// PublicKey is an Ed25519 or ECDSA P-256 public key, with its
// SubjectPublicKeyInfo DER and its pin computed once.
type PublicKey struct {
	key  crypto.PublicKey
	spki []byte
	pin  string
}

// NewPublicKey wraps an ed25519.PublicKey or a P-256 *ecdsa.PublicKey.
func NewPublicKey(key crypto.PublicKey) (*PublicKey, error) {
	switch k := key.(type) {
	case ed25519.PublicKey:
		if len(k) != ed25519.PublicKeySize {
			return nil, refuse(CodeBadPublicKey, "an Ed25519 key of %d bytes", len(k))
		}
	case *ecdsa.PublicKey:
		if k == nil || k.Curve != elliptic.P256() {
			return nil, refuse(CodeBadPublicKey, "an ECDSA key not on P-256")
		}
	default:
		return nil, refuse(CodeBadPublicKey, "a %T is neither Ed25519 nor P-256", key)
	}
	spki, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return nil, refuseWith(CodeBadPublicKey, err, "cannot encode the key")
	}
	return &PublicKey{key: key, spki: spki, pin: PinSPKI(spki)}, nil
}

// ParsePublicKey parses a SubjectPublicKeyInfo DER (Ed25519 or P-256).
func ParsePublicKey(spkiDER []byte) (*PublicKey, error) {
	key, err := x509.ParsePKIXPublicKey(spkiDER)
	if err != nil {
		return nil, refuseWith(CodeBadPublicKey, err, "cannot parse the SubjectPublicKeyInfo")
	}
	return NewPublicKey(key)
}

// PublicKeyFromProto parses a protocol PublicKey, refusing one whose keyid
// is not the key's pin.
func PublicKeyFromProto(msg *agentv1.PublicKey) (*PublicKey, error) {
	key, err := ParsePublicKey(msg.GetSpkiDer())
	if err != nil {
		return nil, err
	}
	if key.pin != msg.GetKeyid() {
		return nil, refuse(CodeBadPublicKey, "keyid %s is not the key's pin", msg.GetKeyid())
	}
	return key, nil
}

// Key returns the ed25519.PublicKey or *ecdsa.PublicKey.
func (k *PublicKey) Key() crypto.PublicKey { return k.key }

// SPKI returns the SubjectPublicKeyInfo DER.
func (k *PublicKey) SPKI() []byte { return bytes.Clone(k.spki) }

// Pin returns the key's pin, also its DSSE keyid and JOSE kid.
func (k *PublicKey) Pin() string { return k.pin }

// ECDSA returns the key when it is a P-256 key.
func (k *PublicKey) ECDSA() (*ecdsa.PublicKey, bool) {
	pub, ok := k.key.(*ecdsa.PublicKey)
	return pub, ok
}

// Proto returns the key as a protocol PublicKey message.
func (k *PublicKey) Proto() *agentv1.PublicKey {
	return &agentv1.PublicKey{Keyid: k.pin, SpkiDer: k.SPKI()}
}

// Equal reports whether both are the same key.
func (k *PublicKey) Equal(other *PublicKey) bool {
	return other != nil && bytes.Equal(k.spki, other.spki)
}

// Verify reports whether sig is this key's signature over msg: Ed25519 over
// the message, or ASN.1 DER ECDSA over its SHA-256.
func (k *PublicKey) Verify(msg, sig []byte) bool {
	switch key := k.key.(type) {
	case ed25519.PublicKey:
		return len(sig) == ed25519.SignatureSize && ed25519.Verify(key, msg, sig)
	case *ecdsa.PublicKey:
		digest := sha256.Sum256(msg)
		return ecdsa.VerifyASN1(key, digest[:], sig)
	}
	return false
}

// PublicKeyOf returns the public half of a signer as a *PublicKey.
func PublicKeyOf(signer crypto.Signer) (*PublicKey, error) {
	if signer == nil {
		return nil, refuse(CodeBadPublicKey, "no signer")
	}
	return NewPublicKey(signer.Public())
}

// SignMessage signs msg with signer: Ed25519 over the message itself, ECDSA
// P-256 over its SHA-256 (ASN.1 DER, as crypto.Signer returns for ECDSA keys,
// TPM-held ones included). rand goes to the signer: crypto/rand.Reader in
// production; nil asks an in-memory *ecdsa.PrivateKey for an RFC 6979
// deterministic signature (fixtures and tests).
func SignMessage(rand io.Reader, signer crypto.Signer, msg []byte) ([]byte, error) {
	switch pub := signer.Public().(type) {
	case ed25519.PublicKey:
		return signer.Sign(rand, msg, crypto.Hash(0))
	case *ecdsa.PublicKey:
		if pub.Curve != elliptic.P256() {
			return nil, errors.New("pki: an ECDSA signer not on P-256")
		}
		digest := sha256.Sum256(msg)
		return signer.Sign(rand, digest[:], crypto.SHA256)
	default:
		return nil, fmt.Errorf("pki: cannot sign with a %T key", pub)
	}
}
