// Package attestor is the Go twin of Rust's pki::tpm attestor: the control
// plane's checks of the two TPM join rounds, with the same codes in the
// same order (see pki/src/tpm/attestor.rs for the list). bcd does not
// attest itself; this package lets Go verify the shared corpus
// (testdata/tpm/cases.json) and the EK chain, so that both languages agree
// on every refusal. Pure: no TPM, no I/O, no clock.
package attestor

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/binary"
	"math/big"
	"slices"
	"time"

	"bcd/internal/pki"
	"github.com/google/go-tpm/tpm2"
)

// AsOf is the time the fixtures are verified at (2026-01-01T00:00:00Z).
var AsOf = time.UnixMilli(1767225600000).UTC()

// NodeKeyPolicy is the attestor's nodeKey policy.
type NodeKeyPolicy string

// The policies.
const (
	// PolicyTPM: the node key is certified by the AK and is the CSR's key.
	PolicyTPM NodeKeyPolicy = "tpm"
	// PolicyCertified: the answer certifies a TPM key; the CSR's may differ.
	PolicyCertified NodeKeyPolicy = "certified"
	// PolicyAny: any node key; a certification, if present, is checked.
	PolicyAny NodeKeyPolicy = "any"
)

// Round1 is what the node sends first (bare TPMT_PUBLICs, DER certificate).
type Round1 struct {
	EKPublic      []byte
	EKCertificate []byte
	AKPublic      []byte
}

// Enrollment is a verified round 1.
type Enrollment struct {
	EK        *tpm2.TPMTPublic
	EKBinding [32]byte
	AK        *ecdsa.PublicKey
	AKName    []byte
}

// Signed is a TPMS_ATTEST and its TPMT_SIGNATURE.
type Signed struct {
	Attest    []byte
	Signature []byte
}

// CertifiedKey is the node key's public area and its certification.
type CertifiedKey struct {
	Public  []byte
	Certify Signed
}

// Answer is what the node sends in round 2.
type Answer struct {
	ActivatedSecret []byte
	Quote           Signed
	PCRValues       [][]byte
	NodeKey         *CertifiedKey
	CSR             []byte
}

// Attestation is a verified join.
type Attestation struct {
	EKBinding   [32]byte
	AKName      []byte
	PCRValues   [][]byte
	CSR         *x509.CertificateRequest
	CSRKeyInTPM bool
}

// Attestor checks both rounds against its EK roots and nodeKey policy.
type Attestor struct {
	// Roots are the EK roots (DER).
	Roots [][]byte
	// NodeKey is the nodeKey policy.
	NodeKey NodeKeyPolicy
}

// TPMA_OBJECT bits.
const (
	attrFixedTPM            = 1 << 1
	attrFixedParent         = 1 << 4
	attrSensitiveDataOrigin = 1 << 5
	attrRestricted          = 1 << 16
	attrDecrypt             = 1 << 17
	attrSign                = 1 << 18
)

// parsePublic parses a bare TPMT_PUBLIC, refusing trailing bytes.
func parsePublic(b []byte, what string) (*tpm2.TPMTPublic, error) {
	p, err := tpm2.Unmarshal[tpm2.TPMTPublic](b)
	if err != nil {
		return nil, refuseWith(CodeTPMMalformed, err, what)
	}
	if !bytes.Equal(tpm2.Marshal(*p), b) {
		return nil, refuse(CodeTPMMalformed, "%s: trailing or non-canonical bytes", what)
	}
	return p, nil
}

func attrs(p *tpm2.TPMTPublic) uint32 {
	return binary.BigEndian.Uint32(tpm2.Marshal(p.ObjectAttributes))
}

func hasAll(p *tpm2.TPMTPublic, must, mustNot uint32) bool {
	a := attrs(p)
	return a&must == must && a&mustNot == 0
}

// name is nameAlg || SHA-256(TPMT_PUBLIC).
func name(public []byte) []byte {
	d := sha256.Sum256(public)
	return append([]byte{0x00, 0x0b}, d[:]...)
}

// p256 returns the P-256 key of an ECC P-256 public area, or nil.
func p256(p *tpm2.TPMTPublic) *ecdsa.PublicKey {
	if p.Type != tpm2.TPMAlgECC {
		return nil
	}
	params, err := p.Parameters.ECCDetail()
	if err != nil || params.CurveID != tpm2.TPMECCNistP256 {
		return nil
	}
	point, err := p.Unique.ECC()
	if err != nil || len(point.X.Buffer) > 32 || len(point.Y.Buffer) > 32 {
		return nil
	}
	raw := make([]byte, 65)
	raw[0] = 4
	copy(raw[1+32-len(point.X.Buffer):33], point.X.Buffer)
	copy(raw[33+32-len(point.Y.Buffer):], point.Y.Buffer)
	k, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), raw)
	if err != nil {
		return nil
	}
	return k
}

// VerifyEKCertificate checks that an EK certificate is issued by one of
// roots and is valid at `at` (ek-certificate-chain).
func VerifyEKCertificate(der []byte, roots [][]byte, at time.Time) error {
	_, err := verifyEKCertificate(der, roots, at)
	return err
}

func verifyEKCertificate(der []byte, roots [][]byte, at time.Time) (*x509.Certificate, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, refuseWith(CodeEKCertificateChain, err, "the EK certificate does not parse")
	}
	if oid := pki.UnknownCriticalExtension(cert); oid != nil {
		return nil, refuse(CodeEKCertificateChain, "the EK certificate has an unknown critical extension %v", oid)
	}
	pool := x509.NewCertPool()
	for _, r := range roots {
		// A root with an unknown critical extension verifies nothing, as in Rust.
		if root, err := x509.ParseCertificate(r); err == nil && pki.UnknownCriticalExtension(root) == nil {
			pool.AddCert(root)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{
		Roots:       pool,
		CurrentTime: at,
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	}); err != nil {
		return nil, refuseWith(CodeEKCertificateChain, err, "the EK certificate does not chain to an EK root")
	}
	return cert, nil
}

// VerifyRound1 checks round 1 at `at`, in the order of the Rust attestor.
func (a *Attestor) VerifyRound1(r *Round1, at time.Time) (*Enrollment, error) {
	ek, err := parsePublic(r.EKPublic, "EK public")
	if err != nil {
		return nil, err
	}
	ak, err := parsePublic(r.AKPublic, "AK public")
	if err != nil {
		return nil, err
	}
	cert, err := verifyEKCertificate(r.EKCertificate, a.Roots, at)
	if err != nil {
		return nil, err
	}
	certKey, ok := cert.PublicKey.(*ecdsa.PublicKey)
	ekKey := p256(ek)
	if !ok || ekKey == nil || !certKey.Equal(ekKey) {
		return nil, refuse(CodeEKMismatch, "the EK certificate names another key than the EK")
	}
	if ek.NameAlg != tpm2.TPMAlgSHA256 {
		return nil, refuse(CodeEKAttributes, "name algorithm %#x", ek.NameAlg)
	}
	if !hasAll(ek, attrRestricted|attrDecrypt|attrFixedTPM|attrFixedParent, attrSign) {
		return nil, refuse(CodeEKAttributes, "attributes %#x", attrs(ek))
	}
	if params, err := ek.Parameters.ECCDetail(); err != nil || !isAES128CFB(params.Symmetric) {
		return nil, refuse(CodeEKAttributes, "the EK's symmetric algorithm is not AES-128-CFB")
	}
	akKey := p256(ak)
	if akKey == nil {
		return nil, refuse(CodeAKAttributes, "the AK is not an ECC P-256 key")
	}
	if ak.NameAlg != tpm2.TPMAlgSHA256 {
		return nil, refuse(CodeAKAttributes, "name algorithm %#x", ak.NameAlg)
	}
	if !hasAll(ak, attrRestricted|attrSign|attrFixedTPM|attrFixedParent|attrSensitiveDataOrigin, attrDecrypt) {
		return nil, refuse(CodeAKAttributes, "attributes %#x", attrs(ak))
	}
	if params, _ := ak.Parameters.ECCDetail(); !isECDSASHA256(params) || params.Symmetric.Algorithm != tpm2.TPMAlgNull {
		return nil, refuse(CodeAKAttributes, "the AK's scheme is not ECDSA-SHA256")
	}
	return &Enrollment{EK: ek, EKBinding: sha256.Sum256(r.EKPublic), AK: akKey, AKName: name(r.AKPublic)}, nil
}

func isAES128CFB(s tpm2.TPMTSymDefObject) bool {
	if s.Algorithm != tpm2.TPMAlgAES {
		return false
	}
	bits, err1 := s.KeyBits.AES()
	mode, err2 := s.Mode.AES()
	return err1 == nil && err2 == nil && *bits == 128 && *mode == tpm2.TPMAlgCFB
}

func isECDSASHA256(params *tpm2.TPMSECCParms) bool {
	if params == nil || params.Scheme.Scheme != tpm2.TPMAlgECDSA {
		return false
	}
	d, err := params.Scheme.Details.ECDSA()
	return err == nil && d.HashAlg == tpm2.TPMAlgSHA256
}

// verifySignature checks that sig (a TPMT_SIGNATURE) is key's ECDSA-SHA256
// signature over msg; any defect of the signature bytes is a failure.
func verifySignature(key *ecdsa.PublicKey, msg, sig []byte) bool {
	if len(sig) < 4 || binary.BigEndian.Uint16(sig) != uint16(tpm2.TPMAlgECDSA) ||
		binary.BigEndian.Uint16(sig[2:]) != uint16(tpm2.TPMAlgSHA256) {
		return false
	}
	rest := sig[4:]
	read := func() ([]byte, bool) {
		if len(rest) < 2 {
			return nil, false
		}
		n := int(binary.BigEndian.Uint16(rest))
		if len(rest) < 2+n {
			return nil, false
		}
		v := rest[2 : 2+n]
		rest = rest[2+n:]
		return v, true
	}
	r, ok1 := read()
	s, ok2 := read()
	if !ok1 || !ok2 || len(rest) != 0 || len(r) > 32 || len(s) > 32 {
		return false
	}
	d := sha256.Sum256(msg)
	return ecdsa.Verify(key, d[:], new(big.Int).SetBytes(r), new(big.Int).SetBytes(s))
}

// parseAttest parses a TPM-generated TPMS_ATTEST of type want.
func parseAttest(b []byte, want tpm2.TPMST, what string) (*tpm2.TPMSAttest, error) {
	a, err := tpm2.Unmarshal[tpm2.TPMSAttest](b)
	if err != nil {
		return nil, refuseWith(CodeTPMMalformed, err, what)
	}
	if !bytes.Equal(tpm2.Marshal(*a), b) {
		return nil, refuse(CodeTPMMalformed, "%s: trailing or non-canonical bytes", what)
	}
	if a.Type != want {
		return nil, refuse(CodeTPMMalformed, "%s: attestation type %#x", what, a.Type)
	}
	return a, nil
}

// VerifyAnswer checks round 2 against the secret and nonce of the
// challenge, in the order of the Rust attestor.
func (a *Attestor) VerifyAnswer(e *Enrollment, secret, nonce []byte, ans *Answer) (*Attestation, error) {
	if subtle.ConstantTimeCompare(ans.ActivatedSecret, secret) != 1 {
		return nil, refuse(CodeCredential, "the activated secret is not the challenge's")
	}
	if !verifySignature(e.AK, ans.Quote.Attest, ans.Quote.Signature) {
		return nil, refuse(CodeQuoteSignature, "the quote is not signed by the AK")
	}
	quote, err := parseAttest(ans.Quote.Attest, tpm2.TPMSTAttestQuote, "quote")
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(quote.ExtraData.Buffer, nonce) {
		return nil, refuse(CodeQuoteNonce, "the quote is over another nonce")
	}
	info, err := quote.Attested.Quote()
	if err != nil {
		return nil, refuseWith(CodeTPMMalformed, err, "quote")
	}
	var banks []tpm2.TPMSPCRSelection
	for _, s := range info.PCRSelect.PCRSelections {
		if len(indices(s.PCRSelect)) > 0 {
			banks = append(banks, s)
		}
	}
	want := []int{0, 1, 2, 3, 4, 5, 6, 7}
	if len(banks) != 1 || banks[0].Hash != tpm2.TPMAlgSHA256 || !slices.Equal(indices(banks[0].PCRSelect), want) {
		return nil, refuse(CodePCRSelection, "the quote does not select SHA-256 PCRs 0-7")
	}
	h := sha256.New()
	for _, v := range ans.PCRValues {
		if len(v) != 32 {
			return nil, refuse(CodePCRDigest, "a PCR value of %d bytes", len(v))
		}
		h.Write(v)
	}
	if len(ans.PCRValues) != len(want) || !bytes.Equal(h.Sum(nil), info.PCRDigest.Buffer) {
		return nil, refuse(CodePCRDigest, "the reported PCR values do not match the quoted digest")
	}

	csr, err := x509.ParseCertificateRequest(ans.CSR)
	if err != nil {
		return nil, refuseWith(CodeCSRMalformed, err, "the CSR does not parse")
	}
	csrKey, ok := csr.PublicKey.(*ecdsa.PublicKey)
	if csr.SignatureAlgorithm != x509.ECDSAWithSHA256 || !ok || csrKey.Curve != elliptic.P256() {
		return nil, refuse(CodeCSRMalformed, "the CSR is not ECDSA P-256 / SHA-256")
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, refuseWith(CodeCSRSignature, err, "the CSR's signature does not verify")
	}

	var certified *ecdsa.PublicKey
	switch {
	case ans.NodeKey != nil:
		if certified, err = verifyCertification(e.AK, nonce, ans.NodeKey); err != nil {
			return nil, err
		}
	case a.NodeKey != PolicyAny:
		return nil, refuse(CodeNodeKeyUncertified, "the node key is not certified by the AK")
	}
	inTPM := certified != nil && certified.Equal(csrKey)
	if a.NodeKey == PolicyTPM && !inTPM {
		return nil, refuse(CodeNodeKeyNotCSR, "the CSR's key is not the TPM node key certified by the AK")
	}
	return &Attestation{EKBinding: e.EKBinding, AKName: e.AKName, PCRValues: ans.PCRValues, CSR: csr, CSRKeyInTPM: inTPM}, nil
}

// VerifyKeyCertification checks the AK's certification of a node key over
// nonce outside a join, against the AK's bare TPMT_PUBLIC as stored at the
// join, and returns the certified key: a renewal's next key, whose nonce is
// SHA-256(csr_der) (Rust's verify_key_certification, same codes in the same
// order: tpm-malformed, certify-signature, certify-nonce, certify-name,
// node-key-attributes).
func VerifyKeyCertification(akPublic, nonce []byte, k *CertifiedKey) (*ecdsa.PublicKey, error) {
	ak, err := parsePublic(akPublic, "AK public")
	if err != nil {
		return nil, err
	}
	akKey := p256(ak)
	if akKey == nil {
		return nil, refuse(CodeTPMMalformed, "AK public: not an ECC P-256 key")
	}
	return verifyCertification(akKey, nonce, k)
}

func verifyCertification(ak *ecdsa.PublicKey, nonce []byte, k *CertifiedKey) (*ecdsa.PublicKey, error) {
	public, err := parsePublic(k.Public, "node key public")
	if err != nil {
		return nil, err
	}
	if !verifySignature(ak, k.Certify.Attest, k.Certify.Signature) {
		return nil, refuse(CodeCertifySignature, "the node key's certification is not signed by the AK")
	}
	att, err := parseAttest(k.Certify.Attest, tpm2.TPMSTAttestCertify, "certification")
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(att.ExtraData.Buffer, nonce) {
		return nil, refuse(CodeCertifyNonce, "the node key's certification is over another nonce")
	}
	info, err := att.Attested.Certify()
	if err != nil {
		return nil, refuseWith(CodeTPMMalformed, err, "certification")
	}
	if public.NameAlg != tpm2.TPMAlgSHA256 || !bytes.Equal(info.Name.Buffer, name(k.Public)) {
		return nil, refuse(CodeCertifyName, "the certification names another object than the node key")
	}
	key := p256(public)
	if key == nil {
		return nil, refuse(CodeNodeKeyAttributes, "the node key is not an ECC P-256 key")
	}
	if !hasAll(public, attrSign|attrFixedTPM|attrFixedParent|attrSensitiveDataOrigin, attrRestricted|attrDecrypt) {
		return nil, refuse(CodeNodeKeyAttributes, "attributes %#x", attrs(public))
	}
	return key, nil
}

func indices(bitmap []byte) []int {
	var out []int
	for i := range len(bitmap) * 8 {
		if bitmap[i/8]&(1<<(i%8)) != 0 {
			out = append(out, i)
		}
	}
	return out
}
