// node.key's two forms: a software key (PKCS#8 PEM, "PRIVATE KEY"), or a
// reference to a node key that lives in the TPM, a PEM-like record with no
// key material:
//
//	-----BEGIN BCD TPM NODE KEY-----
//	AK-Handle: 0x81010002
//	Handle: 0x81000002
//
//	<base64 of the node key's TPMT_PUBLIC: its public area, no secret>
//	-----END BCD TPM NODE KEY-----
//
// Handle is the key's persistent handle; the public area lets bcd check
// that the TPM still holds that key there, and compute its pin without the
// TPM. AK-Handle is the AK that certifies the key's successors.

package identity

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"bcd/internal/pki"
	"bcd/internal/tpm"
	"github.com/google/go-tpm/tpm2"
)

// The PEM types of node.key.
const (
	softwareKeyType = "PRIVATE KEY"
	// TPMKeyType is the PEM type of a reference to a TPM-resident node key.
	TPMKeyType = "BCD TPM NODE KEY"
)

// ErrKeyFile means node.key is neither form.
var ErrKeyFile = errors.New("node.key is neither a PKCS#8 key nor a " + TPMKeyType + " record")

// ErrNoTPM means node.key refers to a TPM key, but no TPM was given.
var ErrNoTPM = errors.New("node.key is a TPM key, and this bcd has no TPM to open")

// storedKey is node.key as read: a software key, or a TPM key's reference.
type storedKey struct {
	software *ecdsa.PrivateKey
	// handle and akHandle locate a TPM key; public is its TPMT_PUBLIC.
	handle, akHandle tpm2.TPMHandle
	public           []byte
	// key is the public key of either form.
	key *ecdsa.PublicKey
}

// pin is the key's SPKI pin.
func (s *storedKey) pin() (string, error) {
	p, err := pki.NewPublicKey(s.key)
	if err != nil {
		return "", err
	}
	return p.Pin(), nil
}

// encodeKey is node.key for key: a software ECDSA key as PKCS#8 PEM, a
// TPM node key as the record (ak is the AK that certifies its successors).
func encodeKey(key crypto.Signer, ak tpm2.TPMHandle) ([]byte, error) {
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			return nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: softwareKeyType, Bytes: der}), nil
	case *tpm.NodeKey:
		return pem.EncodeToMemory(&pem.Block{
			Type:    TPMKeyType,
			Headers: map[string]string{"Handle": handleString(k.Handle()), "AK-Handle": handleString(ak)},
			Bytes:   k.PublicArea(),
		}), nil
	default:
		return nil, fmt.Errorf("a node key of type %T cannot be stored", key)
	}
}

func handleString(h tpm2.TPMHandle) string { return fmt.Sprintf("%#x", uint32(h)) }

func parseHandle(s string) (tpm2.TPMHandle, error) {
	v, err := strconv.ParseUint(strings.TrimSpace(s), 0, 32)
	if err != nil {
		return 0, err
	}
	h := tpm2.TPMHandle(v)
	if h>>24 != 0x81 {
		return 0, fmt.Errorf("%#x is not a persistent handle", v)
	}
	return h, nil
}

// parseKey reads node.key in either form.
func parseKey(data []byte) (*storedKey, error) {
	block, rest := pem.Decode(data)
	if block == nil || len(bytes.TrimSpace(rest)) != 0 {
		return nil, ErrKeyFile
	}
	switch block.Type {
	case softwareKeyType:
		parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
		}
		key, ok := parsed.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("%w: not an ECDSA key", ErrKeyFile)
		}
		return &storedKey{software: key, key: &key.PublicKey}, nil
	case TPMKeyType:
		handle, err := parseHandle(block.Headers["Handle"])
		if err != nil {
			return nil, fmt.Errorf("%w: Handle: %w", ErrKeyFile, err)
		}
		ak, err := parseHandle(block.Headers["AK-Handle"])
		if err != nil {
			return nil, fmt.Errorf("%w: AK-Handle: %w", ErrKeyFile, err)
		}
		key, err := tpm.ECDSAPublic(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: the public area: %w", ErrKeyFile, err)
		}
		return &storedKey{handle: handle, akHandle: ak, public: block.Bytes, key: key}, nil
	default:
		return nil, fmt.Errorf("%w: PEM type %q", ErrKeyFile, block.Type)
	}
}

// signer returns the key as a crypto.Signer: the software key itself, or
// the TPM key at the record's handle, checked to be the recorded key.
func (s *storedKey) signer(t *tpm.TPM) (crypto.Signer, error) {
	if s.software != nil {
		return s.software, nil
	}
	if t == nil {
		return nil, ErrNoTPM
	}
	key, err := t.LoadNodeKey(s.handle)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(key.PublicArea(), s.public) {
		return nil, fmt.Errorf("the TPM holds another key at %s than node.key names", handleString(s.handle))
	}
	return key, nil
}
