// The node's half of the two join rounds (docs/protocol.md, "TPM join (two rounds)"): what bcd sends
// in round 1, how it answers the attestor's challenge in round 2, and the
// next node key of a renewal, certified by the AK over SHA-256(csr).

package tpm

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"

	"github.com/google/go-tpm/tpm2"
)

// Round1 is what bcd sends first: its EK, the EK certificate and a fresh AK.
type Round1 struct {
	// EKPublic is the EK's bare TPMT_PUBLIC.
	EKPublic []byte `json:"ekPublic"`
	// EKCertificate is the EK certificate (DER) from NV 0x01C0000A.
	EKCertificate []byte `json:"ekCertificate"`
	// AKPublic is the AK's bare TPMT_PUBLIC.
	AKPublic []byte `json:"akPublic"`
}

// Challenge is the attestor's answer to round 1.
type Challenge struct {
	// CredentialBlob is the TPM2B_ID_OBJECT's contents (no size prefix).
	CredentialBlob []byte `json:"credentialBlob"`
	// EncryptedSecret is the TPM2B_ENCRYPTED_SECRET's contents.
	EncryptedSecret []byte `json:"encryptedSecret"`
	// Nonce goes into the quote and the certification.
	Nonce []byte `json:"nonce"`
}

// CertifiedKey is the node key's public area and the AK's certification.
type CertifiedKey struct {
	// Public is the node key's bare TPMT_PUBLIC.
	Public []byte `json:"public"`
	// Certify is TPM2_Certify of the node key by the AK, over the nonce.
	Certify Signed `json:"certify"`
}

// Answer is what bcd sends in round 2.
type Answer struct {
	// ActivatedSecret is what ActivateCredential returned.
	ActivatedSecret []byte `json:"activatedSecret"`
	// Quote is the AK's quote of SHA-256 PCRs 0–7 over the nonce.
	Quote Signed `json:"quote"`
	// PCRValues are the values of PCRs 0–7, in order.
	PCRValues [][]byte `json:"pcrValues"`
	// NodeKey is the TPM-resident node key and its certification.
	NodeKey *CertifiedKey `json:"nodeKey"`
	// CSR is the PKCS#10 request for the node key, signed in the TPM.
	CSR []byte `json:"csr"`
}

// BeginJoin makes round 1: it reads the EK certificate and the EK, and
// creates a new AK persistent at ak.
func BeginJoin(t *TPM, ak tpm2.TPMHandle) (*Round1, error) {
	cert, err := t.EKCertificate()
	if err != nil {
		return nil, err
	}
	ek, err := t.EKPublic()
	if err != nil {
		return nil, err
	}
	akPublic, err := t.CreateAK(ak)
	if err != nil {
		return nil, err
	}
	return &Round1{EKPublic: ek, EKCertificate: cert, AKPublic: akPublic}, nil
}

// AnswerChallenge makes round 2 with the AK at ak: it activates the
// credential, quotes PCRs 0–7 over the nonce, creates the node key
// persistent at nodeKey, has the AK certify it, and signs a CSR (subject CN
// commonName) with it in the TPM. The node key is returned for later use
// (TLS, renewal).
func AnswerChallenge(t *TPM, ak, nodeKey tpm2.TPMHandle, ch *Challenge, commonName string) (*Answer, *NodeKey, error) {
	secret, err := t.ActivateCredential(ak, ch.CredentialBlob, ch.EncryptedSecret)
	if err != nil {
		return nil, nil, err
	}
	quote, err := t.Quote(ak, ch.Nonce, QuotedPCRs)
	if err != nil {
		return nil, nil, err
	}
	values, err := t.ReadPCRs(QuotedPCRs)
	if err != nil {
		return nil, nil, err
	}
	key, err := t.CreateNodeKey(nodeKey)
	if err != nil {
		return nil, nil, err
	}
	certify, err := t.Certify(ak, key, ch.Nonce)
	if err != nil {
		return nil, nil, err
	}
	csr, err := signCSR(key, commonName)
	if err != nil {
		return nil, nil, fmt.Errorf("signing the CSR with the node key: %w", err)
	}
	return &Answer{
		ActivatedSecret: secret,
		Quote:           quote,
		PCRValues:       values,
		NodeKey:         &CertifiedKey{Public: key.PublicArea(), Certify: certify},
		CSR:             csr,
	}, key, nil
}

// Renewal is what a TPM node sends to Gateway.Renew besides its client
// certificate: a CSR signed by the next node key and the AK's
// certification of that key.
type Renewal struct {
	// CSR is the PKCS#10 request (subject CN commonName), signed in the TPM.
	CSR []byte
	// NodeKey is the next key's public area and TPM2_Certify of it by the AK
	// over RenewalNonce(CSR).
	NodeKey CertifiedKey
}

// RenewalNonce is the qualifying data of a renewal's certification:
// SHA-256 of the whole CSR DER (docs/protocol.md, "Renewal").
func RenewalNonce(csr []byte) []byte {
	d := sha256.Sum256(csr)
	return d[:]
}

// Renew makes the next node key persistent at next (replacing any object
// there: never pass the current key's handle), signs a CSR (subject CN
// commonName) with it in the TPM, and has the AK at ak certify it over
// RenewalNonce(csr). The key is returned for use once the gateway has
// certified it.
func Renew(t *TPM, ak, next tpm2.TPMHandle, commonName string) (*Renewal, *NodeKey, error) {
	key, err := t.CreateNodeKey(next)
	if err != nil {
		return nil, nil, err
	}
	csr, err := signCSR(key, commonName)
	if err != nil {
		return nil, nil, fmt.Errorf("signing the CSR with the next node key: %w", err)
	}
	certify, err := t.Certify(ak, key, RenewalNonce(csr))
	if err != nil {
		return nil, nil, err
	}
	return &Renewal{CSR: csr, NodeKey: CertifiedKey{Public: key.PublicArea(), Certify: certify}}, key, nil
}

// signCSR is a PKCS#10 request with subject CN commonName, ECDSA-SHA256,
// signed by key in the TPM.
func signCSR(key *NodeKey, commonName string) ([]byte, error) {
	return x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:            pkix.Name{CommonName: commonName},
		SignatureAlgorithm: x509.ECDSAWithSHA256,
	}, key)
}
