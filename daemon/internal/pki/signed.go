// The envelope of a signed object, a certificate or a CSR: what is read of
// it before its signature is checked (docs/formats.md, "Certificates"), the
// twin of the Rust side's pki/src/x509/signed.rs, rule for rule. Nothing
// more is parsed until the signature verified, so that the bytes an
// unauthenticated peer controls meet this small reader alone, and both
// languages refuse exactly the same ones: crypto/x509 and x509-cert parse
// names, keys and extensions with different strictness.
//
// DER, TLV by TLV: a one-byte tag (the high-tag-number form is refused), a
// definite length in its shortest form, of at most four octets, and the
// contents within what is left.

package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"errors"
)

// tlv is one DER TLV: its tag, its contents and its whole encoding.
type tlv struct {
	tag             byte
	contents, whole []byte
}

const (
	tagSequence  = 0x30
	tagInteger   = 0x02
	tagBitString = 0x03
	// tagContext0 is [0], constructed: a certificate's version, a CSR's attributes.
	tagContext0 = 0xa0
)

// ecdsaWithSHA256ID is the AlgorithmIdentifier of ecdsa-with-SHA256, byte
// for byte: the OID and no parameters (RFC 5758, 3.2).
var ecdsaWithSHA256ID = []byte{0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02}

// p256SPKIPrefix is a P-256 SubjectPublicKeyInfo up to the point:
// id-ecPublicKey, the named curve prime256v1, and a BIT STRING of an
// uncompressed point (0x04).
var p256SPKIPrefix = []byte{
	0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce,
	0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00, 0x04,
}

// readTLV reads one TLV off the front of input; it returns it and what follows.
func readTLV(input []byte) (tlv, []byte, error) {
	if len(input) < 2 {
		return tlv{}, nil, errors.New("truncated tag or length")
	}
	tag, first, rest := input[0], input[1], input[2:]
	if tag&0x1f == 0x1f {
		return tlv{}, nil, errors.New("a high tag number")
	}
	var length int
	switch {
	case first < 0x80:
		length = int(first)
	case first == 0x80:
		return tlv{}, nil, errors.New("an indefinite length")
	default:
		n := int(first & 0x7f)
		if n > 4 || len(rest) < n {
			return tlv{}, nil, errors.New("a length of more than four octets, or truncated")
		}
		if rest[0] == 0 {
			return tlv{}, nil, errors.New("a length with a leading zero octet")
		}
		for _, b := range rest[:n] {
			length = length<<8 | int(b)
		}
		if length < 0x80 {
			return tlv{}, nil, errors.New("a long-form length below 128")
		}
		rest = rest[n:]
	}
	if len(rest) < length {
		return tlv{}, nil, errors.New("contents longer than the input")
	}
	header := len(input) - len(rest)
	return tlv{tag: tag, contents: rest[:length], whole: input[:header+length]}, rest[length:], nil
}

// derElements returns the TLVs contents is made of, in order.
func derElements(contents []byte) ([]tlv, error) {
	var out []tlv
	for len(contents) > 0 {
		t, rest, err := readTLV(contents)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
		contents = rest
	}
	return out, nil
}

// signedObject is SEQUENCE { body, AlgorithmIdentifier, BIT STRING } and
// nothing after: what was signed, how, and the signature.
type signedObject struct {
	// body is the signed body (TBSCertificate, CertificationRequestInfo), whole.
	body tlv
	// fields are the body's elements.
	fields []tlv
	// algorithm is the AlgorithmIdentifier, whole.
	algorithm []byte
	// signature is the BIT STRING's contents (its unused-bits octet first).
	signature []byte
}

// verifies reports whether the signature is key's ECDSA-SHA256 signature
// over the body: a BIT STRING of whole octets holding a DER signature.
func (s *signedObject) verifies(key *ecdsa.PublicKey) bool {
	if len(s.signature) == 0 || s.signature[0] != 0 {
		return false
	}
	digest := sha256.Sum256(s.body.whole)
	return ecdsa.VerifyASN1(key, digest[:], s.signature[1:])
}

func parseSigned(der []byte) (*signedObject, error) {
	outer, rest, err := readTLV(der)
	if err != nil {
		return nil, err
	}
	if len(rest) != 0 {
		return nil, errors.New("data after the signed object")
	}
	parts, err := derElements(outer.contents)
	if err != nil {
		return nil, err
	}
	if outer.tag != tagSequence || len(parts) != 3 ||
		parts[0].tag != tagSequence || parts[1].tag != tagSequence || parts[2].tag != tagBitString {
		return nil, errors.New("not a SEQUENCE of a SEQUENCE, an AlgorithmIdentifier and a BIT STRING")
	}
	fields, err := derElements(parts[0].contents)
	if err != nil {
		return nil, err
	}
	return &signedObject{body: parts[0], fields: fields, algorithm: parts[1].whole, signature: parts[2].contents}, nil
}

// certificateEnvelope is a certificate's envelope: the TBSCertificate
// begins with an optional [0] version, a serial number, a signature
// algorithm that is the certificate's own, byte for byte (RFC 5280,
// 4.1.1.2), and the issuer; the rest of it waits for the signature.
type certificateEnvelope struct {
	signed *signedObject
	// issuer is the issuer Name, whole.
	issuer []byte
}

func parseCertificateEnvelope(der []byte) (*certificateEnvelope, error) {
	s, err := parseSigned(der)
	if err != nil {
		return nil, err
	}
	fields := s.fields
	if len(fields) > 0 && fields[0].tag == tagContext0 {
		fields = fields[1:]
	}
	if len(fields) < 3 || fields[0].tag != tagInteger || fields[1].tag != tagSequence || fields[2].tag != tagSequence {
		return nil, errors.New("the TBSCertificate does not begin with a serial number, a signature algorithm and an issuer")
	}
	if !bytes.Equal(fields[1].whole, s.algorithm) {
		return nil, errors.New("the TBSCertificate's signature algorithm is not the certificate's")
	}
	return &certificateEnvelope{signed: s, issuer: fields[2].whole}, nil
}

// csrEnvelope is a CSR's envelope: the CertificationRequestInfo is exactly
// version 0, a subject SEQUENCE, a SubjectPublicKeyInfo and the [0]
// attributes (RFC 2986, 4.1). Subject and attributes are read as TLVs only.
type csrEnvelope struct {
	signed *signedObject
	// subject and spki are the subject Name and the SubjectPublicKeyInfo, whole.
	subject, spki []byte
}

func parseCSREnvelope(der []byte) (*csrEnvelope, error) {
	s, err := parseSigned(der)
	if err != nil {
		return nil, err
	}
	f := s.fields
	if len(f) != 4 || !bytes.Equal(f[0].whole, []byte{tagInteger, 1, 0}) ||
		f[1].tag != tagSequence || f[2].tag != tagSequence || f[3].tag != tagContext0 {
		return nil, errors.New("the CertificationRequestInfo is not version 0, a subject, a key and attributes")
	}
	return &csrEnvelope{signed: s, subject: f[1].whole, spki: f[2].whole}, nil
}

// parseP256SPKI returns the P-256 key of an SPKI that is exactly
// id-ecPublicKey on prime256v1 with an uncompressed point on the curve: the
// one form both languages encode, so the key re-encodes to the bytes it came
// from.
func parseP256SPKI(spki []byte) (*ecdsa.PublicKey, error) {
	if len(spki) != len(p256SPKIPrefix)+64 || !bytes.Equal(spki[:len(p256SPKIPrefix)], p256SPKIPrefix) {
		return nil, errors.New("the key is not an uncompressed P-256 point")
	}
	key, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), spki[len(p256SPKIPrefix)-1:])
	if err != nil {
		return nil, errors.New("the point is not on P-256")
	}
	return key, nil
}
