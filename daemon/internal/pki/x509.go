// Certificates (docs/formats.md, "Certificates"): CSRs bcd makes and the control plane
// parses, and verification of a certificate issued by an expected CA, in the
// order of the Rust side's pki/src/x509/verify.rs (the envelope, issuer name,
// signature algorithm, signature, and only then the whole certificate with
// crypto/x509: critical extensions, validity, profile), then
// x509.Certificate.Verify at the given time with the usage's ExtKeyUsage.

package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"io"
	"net/netip"
	"time"
)

// CSR is a certificate signing request whose self-signature verified.
type CSR struct {
	// PublicKey is the requested P-256 key.
	PublicKey *ecdsa.PublicKey
	// SPKI is its SubjectPublicKeyInfo DER.
	SPKI []byte
	// Pin is its pin.
	Pin string
	// Subject is the requested subject name, when encoding/asn1 reads it
	// as one (zero otherwise): nothing is checked against it, the names of
	// a node certificate come from the join.
	Subject pkix.Name
}

// CreateCSR makes a PKCS#10 CSR for signer's P-256 key with subject CN
// commonName and no extensions, signed ECDSA-SHA256. rand goes to the signer.
func CreateCSR(rand io.Reader, signer crypto.Signer, commonName string) ([]byte, error) {
	pub, ok := signer.Public().(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		return nil, errors.New("pki: a CSR key must be ECDSA P-256")
	}
	template := &x509.CertificateRequest{
		Subject:            pkix.Name{CommonName: commonName},
		SignatureAlgorithm: x509.ECDSAWithSHA256,
	}
	return x509.CreateCertificateRequest(rand, template, signer)
}

// ParseCSR parses a CSR and verifies its self-signature, in the order of
// the Rust side's pki/src/x509/csr.rs: the envelope of signed.go (the
// CertificationRequestInfo exactly version 0, a subject, a key and
// attributes), the algorithm ecdsa-with-SHA256 without parameters, the key
// an uncompressed P-256 point in the one SPKI form (csr-malformed, each),
// then the self-signature over the info's bytes as they came
// (csr-signature). Subject and attributes are not interpreted (the key is
// all the Join path takes from a CSR, and a node can self-sign any name).
func ParseCSR(der []byte) (*CSR, error) {
	req, err := parseCSREnvelope(der)
	if err != nil {
		return nil, refuseWith(CodeCSRMalformed, err, "cannot parse the CSR")
	}
	if !bytes.Equal(req.signed.algorithm, ecdsaWithSHA256ID) {
		return nil, refuse(CodeCSRMalformed, "the signature algorithm is not ecdsa-with-SHA256 without parameters")
	}
	pub, err := parseP256SPKI(req.spki)
	if err != nil {
		return nil, refuseWith(CodeCSRMalformed, err, "the CSR's key")
	}
	if !req.signed.verifies(pub) {
		return nil, refuse(CodeCSRSignature, "the CSR's signature does not verify")
	}
	csr := &CSR{PublicKey: pub, SPKI: bytes.Clone(req.spki), Pin: PinSPKI(req.spki)}
	var subject pkix.RDNSequence
	if rest, err := asn1.Unmarshal(req.subject, &subject); err == nil && len(rest) == 0 {
		csr.Subject.FillFromRDNSequence(&subject)
	}
	return csr, nil
}

// Usage is what a verified certificate is for.
type Usage int

const (
	// UsageCA is a CA certificate (basic constraints CA:true).
	UsageCA Usage = iota
	// UsageClient is a node certificate (EKU clientAuth, not a CA).
	UsageClient
	// UsageServer is a serving certificate (EKU serverAuth, not a CA).
	UsageServer
)

// ParseUsage parses "ca", "client" or "server".
func ParseUsage(s string) (Usage, bool) {
	switch s {
	case "ca":
		return UsageCA, true
	case "client":
		return UsageClient, true
	case "server":
		return UsageServer, true
	}
	return 0, false
}

// VerifyOptions says how to verify a certificate.
type VerifyOptions struct {
	// Usage is what the certificate must be for.
	Usage Usage
	// DNSName, when not empty, must be among a serving certificate's names.
	DNSName string
	// At is the time of the check.
	At time.Time
}

// CertificateInfo is what a verified certificate says.
type CertificateInfo struct {
	// CommonName is the subject's (last) common name.
	CommonName string
	// URIs are the URI SANs, as written in the certificate.
	URIs []string
	// DNSNames are the DNS SANs.
	DNSNames []string
	// IPs are the IP address SANs.
	IPs []netip.Addr
	// IsCA reports basic constraints CA:true.
	IsCA bool
	// SPKI is the subject key's SubjectPublicKeyInfo DER.
	SPKI []byte
	// Pin is the subject key's pin.
	Pin string
	// NotBefore and NotAfter bound the validity.
	NotBefore, NotAfter time.Time
	// Serial is the serial number's bytes.
	Serial []byte
	// Certificate is the parsed certificate.
	Certificate *x509.Certificate
}

// VerifyIssued checks that leafDER was issued by the CA caDER and is valid
// at opts.At for opts.Usage, and returns what it says. Refusals, in the
// order of the Rust side's pki/src/x509/verify.rs: cert-malformed (the
// leaf's envelope, see signed.go, or the CA does not parse), cert-chain
// (the issuer is not the CA's subject byte for byte, the signature
// algorithm is not ecdsa-with-SHA256 without parameters), cert-malformed
// (the CA key is not P-256), cert-chain (the CA's signature over the
// TBSCertificate as it came); only then is the leaf parsed whole
// (cert-malformed), then cert-chain (a critical extension outside
// understoodExtensions in either), cert-validity (outside
// notBefore..notAfter), cert-chain (the profile: CA:true for a CA, not for a
// leaf), then whatever x509.Certificate.Verify refuses with the CA as the
// only root and the usage's EKU (cert-validity for an expired chain,
// cert-chain otherwise; DNSName is checked there).
func VerifyIssued(leafDER, caDER []byte, opts VerifyOptions) (*CertificateInfo, error) {
	envelope, err := parseCertificateEnvelope(leafDER)
	if err != nil {
		return nil, refuseWith(CodeCertMalformed, err, "cannot parse the certificate")
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, refuseWith(CodeCertMalformed, err, "cannot parse the CA")
	}
	if !bytes.Equal(envelope.issuer, ca.RawSubject) {
		return nil, refuse(CodeCertChain, "issuer name differs from the CA's subject")
	}
	if !bytes.Equal(envelope.signed.algorithm, ecdsaWithSHA256ID) {
		return nil, refuse(CodeCertChain, "the signature algorithm is not ecdsa-with-SHA256 without parameters")
	}
	caKey, ok := ca.PublicKey.(*ecdsa.PublicKey)
	if !ok || caKey.Curve != elliptic.P256() {
		return nil, refuse(CodeCertMalformed, "the CA key is not P-256")
	}
	if !envelope.signed.verifies(caKey) {
		return nil, refuse(CodeCertChain, "signature does not verify under the CA key")
	}
	leaf, err := x509.ParseCertificate(leafDER)
	if err != nil {
		return nil, refuseWith(CodeCertMalformed, err, "cannot parse the certificate")
	}
	for _, c := range []struct {
		cert  *x509.Certificate
		whose string
	}{{leaf, "the certificate"}, {ca, "the CA"}} {
		if oid := UnknownCriticalExtension(c.cert); oid != nil {
			return nil, refuse(CodeCertChain, "%s has an unknown critical extension %v", c.whose, oid)
		}
	}
	info, err := describe(leaf)
	if err != nil {
		return nil, err
	}
	if nowMs := opts.At.UnixMilli(); nowMs < info.NotBefore.UnixMilli() || nowMs > info.NotAfter.UnixMilli() {
		return nil, refuse(CodeCertValidity, "certificate not valid at %d (valid %d..%d)",
			nowMs, info.NotBefore.UnixMilli(), info.NotAfter.UnixMilli())
	}
	if (opts.Usage == UsageCA) != info.IsCA {
		return nil, refuse(CodeCertChain, "CA:%v does not fit the usage", info.IsCA)
	}

	roots := x509.NewCertPool()
	roots.AddCert(ca)
	verify := x509.VerifyOptions{Roots: roots, CurrentTime: opts.At, DNSName: opts.DNSName}
	switch opts.Usage {
	case UsageCA:
		verify.KeyUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageAny}
	case UsageClient:
		verify.KeyUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	case UsageServer:
		verify.KeyUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	if _, err := leaf.Verify(verify); err != nil {
		var invalid x509.CertificateInvalidError
		if errors.As(err, &invalid) && invalid.Reason == x509.Expired {
			return nil, refuseWith(CodeCertValidity, err, "the chain is not valid at that time")
		}
		return nil, refuseWith(CodeCertChain, err, "crypto/x509 refused the chain")
	}
	return info, nil
}

// DescribeCertificate says what a certificate says, without verifying it.
func DescribeCertificate(der []byte) (*CertificateInfo, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, refuseWith(CodeCertMalformed, err, "cannot parse the certificate")
	}
	return describe(cert)
}

func describe(cert *x509.Certificate) (*CertificateInfo, error) {
	uris, err := uriSANs(cert)
	if err != nil {
		return nil, refuseWith(CodeCertMalformed, err, "bad subject alternative names")
	}
	info := &CertificateInfo{
		CommonName:  cert.Subject.CommonName,
		URIs:        uris,
		DNSNames:    cert.DNSNames,
		IsCA:        cert.BasicConstraintsValid && cert.IsCA,
		SPKI:        bytes.Clone(cert.RawSubjectPublicKeyInfo),
		Pin:         PinSPKI(cert.RawSubjectPublicKeyInfo),
		NotBefore:   cert.NotBefore,
		NotAfter:    cert.NotAfter,
		Serial:      cert.SerialNumber.Bytes(),
		Certificate: cert,
	}
	for _, ip := range cert.IPAddresses {
		addr, ok := netip.AddrFromSlice(ip)
		if !ok {
			return nil, refuse(CodeCertMalformed, "an IP SAN of %d bytes", len(ip))
		}
		info.IPs = append(info.IPs, addr)
	}
	return info, nil
}

var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// understoodExtensions are the only extensions a certificate may mark
// critical (RFC 5280, 4.2), the list of the Rust side's pki/src/x509/verify.rs:
// subject key identifier, key usage, subject alternative name, basic
// constraints, authority key identifier and extended key usage. crypto/x509
// understands more (name constraints, policies), which the Rust verifier
// does not check, so both refuse them when critical.
var understoodExtensions = []asn1.ObjectIdentifier{
	{2, 5, 29, 14}, {2, 5, 29, 15}, {2, 5, 29, 17}, {2, 5, 29, 19}, {2, 5, 29, 35}, {2, 5, 29, 37},
}

// UnknownCriticalExtension returns the first critical extension of cert
// outside understoodExtensions, or nil. The TPM attestor refuses EK
// certificates and roots with one, as pki::x509::verify_issued does.
func UnknownCriticalExtension(cert *x509.Certificate) asn1.ObjectIdentifier {
	for _, ext := range cert.Extensions {
		if !ext.Critical {
			continue
		}
		understood := false
		for _, oid := range understoodExtensions {
			understood = understood || ext.Id.Equal(oid)
		}
		if !understood {
			return ext.Id
		}
	}
	return nil
}

// uriSANs returns the URI SANs exactly as written (crypto/x509 keeps them
// only as parsed *url.URL values, whose String may differ).
func uriSANs(cert *x509.Certificate) ([]string, error) {
	var uris []string
	for _, ext := range cert.Extensions {
		if !ext.Id.Equal(oidSubjectAltName) {
			continue
		}
		var names []asn1.RawValue
		if rest, err := asn1.Unmarshal(ext.Value, &names); err != nil || len(rest) != 0 {
			return nil, errors.New("cannot parse the SAN extension")
		}
		for _, name := range names {
			if name.Class == asn1.ClassContextSpecific && name.Tag == 6 {
				uris = append(uris, string(name.Bytes))
			}
		}
	}
	return uris, nil
}
