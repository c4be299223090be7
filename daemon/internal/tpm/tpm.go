// Package tpm is bcd's side of the TPM join (docs/protocol.md, "TPM join (two rounds)"), over go-tpm:
// the EK and its certificate, a restricted ECDSA P-256 attestation key (AK)
// under the EK, ActivateCredential, PCR quotes, and a node key made in the
// TPM, certified by the AK and usable as a crypto.Signer.
//
// Objects cross the wire as bare TPMT_PUBLIC, TPMS_ATTEST and TPMT_SIGNATURE
// encodings, the forms Rust's pki::tpm verifies. The AK and the node key are
// persistent (EvictControl), so a later round, a restart or a renewal finds
// them by handle; bcd keeps only the handle, never key material. Transient
// objects are flushed as soon as a command is done (a TPM has few slots).
//
// A TPM serves one command at a time: every method takes the TPM's lock,
// so a NodeKey may sign from several goroutines.
package tpm

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/asn1"
	"errors"
	"fmt"
	"io"
	"math/big"
	"sync"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
)

// The TPM locations bcd uses.
const (
	// EKCertIndex is the NV index of the ECC P-256 EK certificate (TCG EK
	// Credential Profile, low range).
	EKCertIndex = tpm2.TPMHandle(0x01C0000A)
	// AKHandle is the persistent handle of bcd's AK.
	AKHandle = tpm2.TPMHandle(0x81010002)
	// NodeKeyHandle is the persistent handle of bcd's node key.
	NodeKeyHandle = tpm2.TPMHandle(0x81000002)
	// RenewedNodeKeyHandle is the other handle a node key may live at: a
	// renewal makes the next key at the handle the current one is not at,
	// so the current key keeps signing until the new certificate is in.
	RenewedNodeKeyHandle = tpm2.TPMHandle(0x81000003)
)

// OtherNodeKeyHandle is the handle a renewal makes the next node key at
// when the current one is at h.
func OtherNodeKeyHandle(h tpm2.TPMHandle) tpm2.TPMHandle {
	if h == NodeKeyHandle {
		return RenewedNodeKeyHandle
	}
	return NodeKeyHandle
}

// QuotedPCRs are the PCRs a join quote covers: SHA-256 PCRs 0–7.
var QuotedPCRs = []int{0, 1, 2, 3, 4, 5, 6, 7}

// TPM is one open TPM.
type TPM struct {
	mu sync.Mutex
	t  transport.TPMCloser
}

// Open wraps an open transport (a device, or Dial's stream).
func Open(t transport.TPMCloser) *TPM { return &TPM{t: t} }

// Close closes the transport.
func (t *TPM) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.t.Close()
}

// Shutdown sends TPM2_Shutdown(CLEAR): the orderly end of a session with a
// software TPM that is about to stop (an unorderly stop counts toward the
// dictionary-attack lockout).
func (t *TPM) Shutdown() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, err := tpm2.Shutdown{ShutdownType: tpm2.TPMSUClear}.Execute(t.t)
	return err
}

// object is a loaded object: its handle and name.
type object struct {
	handle tpm2.TPMHandle
	name   tpm2.TPM2BName
	public []byte
}

func (o object) named() tpm2.NamedHandle { return tpm2.NamedHandle{Handle: o.handle, Name: o.name} }

func (o object) auth(s tpm2.Session) tpm2.AuthHandle {
	return tpm2.AuthHandle{Handle: o.handle, Name: o.name, Auth: s}
}

func (t *TPM) flush(o object) {
	_, _ = tpm2.FlushContext{FlushHandle: o.handle}.Execute(t.t)
}

// ekPolicy satisfies the TCG EK's policy, PolicySecret(TPM_RH_ENDORSEMENT).
func ekPolicy(t transport.TPM, handle tpm2.TPMISHPolicy, nonceTPM tpm2.TPM2BNonce) error {
	_, err := tpm2.PolicySecret{
		AuthHandle:    tpm2.TPMRHEndorsement,
		PolicySession: handle,
		NonceTPM:      nonceTPM,
	}.Execute(t)
	return err
}

func ekSession() tpm2.Session { return tpm2.Policy(tpm2.TPMAlgSHA256, 16, ekPolicy) }

// createEK creates the EK (the TCG default ECC P-256 template) as a
// transient object; the caller flushes it.
func (t *TPM) createEK() (object, error) {
	rsp, err := tpm2.CreatePrimary{
		PrimaryHandle: tpm2.TPMRHEndorsement,
		InPublic:      tpm2.New2B(tpm2.ECCEKTemplate),
	}.Execute(t.t)
	if err != nil {
		return object{}, fmt.Errorf("creating the EK: %w", err)
	}
	return object{handle: rsp.ObjectHandle, name: rsp.Name, public: rsp.OutPublic.Bytes()}, nil
}

// createSRK creates the owner hierarchy's ECC P-256 storage key (the parent
// of the node key) as a transient object; the caller flushes it.
func (t *TPM) createSRK() (object, error) {
	rsp, err := tpm2.CreatePrimary{
		PrimaryHandle: tpm2.TPMRHOwner,
		InPublic:      tpm2.New2B(tpm2.ECCSRKTemplate),
	}.Execute(t.t)
	if err != nil {
		return object{}, fmt.Errorf("creating the SRK: %w", err)
	}
	return object{handle: rsp.ObjectHandle, name: rsp.Name, public: rsp.OutPublic.Bytes()}, nil
}

// EKPublic returns the EK's bare TPMT_PUBLIC.
func (t *TPM) EKPublic() ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ek, err := t.createEK()
	if err != nil {
		return nil, err
	}
	t.flush(ek)
	return ek.public, nil
}

// EKCertificate reads the EK certificate (DER) from NV 0x01C0000A.
func (t *TPM) EKCertificate() ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	pub, err := tpm2.NVReadPublic{NVIndex: EKCertIndex}.Execute(t.t)
	if err != nil {
		return nil, fmt.Errorf("reading NV %#x: %w", uint32(EKCertIndex), err)
	}
	contents, err := pub.NVPublic.Contents()
	if err != nil {
		return nil, err
	}
	index := tpm2.NamedHandle{Handle: EKCertIndex, Name: pub.NVName}
	var out []byte
	for offset := uint16(0); offset < contents.DataSize; {
		n := min(contents.DataSize-offset, 512)
		rsp, err := tpm2.NVRead{
			AuthHandle: tpm2.AuthHandle{Handle: EKCertIndex, Name: pub.NVName, Auth: tpm2.PasswordAuth(nil)},
			NVIndex:    index,
			Size:       n,
			Offset:     offset,
		}.Execute(t.t)
		if err != nil {
			return nil, fmt.Errorf("reading the EK certificate: %w", err)
		}
		out = append(out, rsp.Data.Buffer...)
		offset += n
	}
	return out, nil
}

// persistent returns the object at a persistent handle, if any.
func (t *TPM) persistent(h tpm2.TPMHandle) (object, bool) {
	rsp, err := tpm2.ReadPublic{ObjectHandle: h}.Execute(t.t)
	if err != nil {
		return object{}, false
	}
	return object{handle: h, name: rsp.Name, public: rsp.OutPublic.Bytes()}, true
}

// persist makes a loaded object persistent at h, evicting what was there.
func (t *TPM) persist(o object, h tpm2.TPMHandle) (object, error) {
	if old, ok := t.persistent(h); ok {
		if _, err := (tpm2.EvictControl{Auth: tpm2.TPMRHOwner, ObjectHandle: old.named(), PersistentHandle: h}).Execute(t.t); err != nil {
			return object{}, fmt.Errorf("evicting the object at %#x: %w", uint32(h), err)
		}
	}
	if _, err := (tpm2.EvictControl{Auth: tpm2.TPMRHOwner, ObjectHandle: o.named(), PersistentHandle: h}).Execute(t.t); err != nil {
		return object{}, fmt.Errorf("persisting at %#x: %w", uint32(h), err)
	}
	return object{handle: h, name: o.name, public: o.public}, nil
}

// AKTemplate is the AK: a restricted ECDSA-SHA256 P-256 signing key,
// fixedTPM and fixedParent, with no dictionary-attack protection (it has
// an empty auth value).
var AKTemplate = signingKeyTemplate(true)

// NodeKeyTemplate is the node key: the AK's template unrestricted, an
// ECDSA-SHA256 P-256 signing key, fixedTPM and fixedParent (it never
// leaves this TPM).
var NodeKeyTemplate = signingKeyTemplate(false)

// signingKeyTemplate is an ECDSA-SHA256 P-256 signing key, fixedTPM and
// fixedParent, with an empty auth value and no dictionary-attack
// protection; restricted for the AK, which signs only TPM-made structures.
func signingKeyTemplate(restricted bool) tpm2.TPMTPublic {
	return tpm2.TPMTPublic{
		Type:    tpm2.TPMAlgECC,
		NameAlg: tpm2.TPMAlgSHA256,
		ObjectAttributes: tpm2.TPMAObject{
			FixedTPM:            true,
			FixedParent:         true,
			SensitiveDataOrigin: true,
			UserWithAuth:        true,
			NoDA:                true,
			Restricted:          restricted,
			SignEncrypt:         true,
		},
		Parameters: tpm2.NewTPMUPublicParms(tpm2.TPMAlgECC, &tpm2.TPMSECCParms{
			Symmetric: tpm2.TPMTSymDefObject{Algorithm: tpm2.TPMAlgNull},
			Scheme: tpm2.TPMTECCScheme{
				Scheme:  tpm2.TPMAlgECDSA,
				Details: tpm2.NewTPMUAsymScheme(tpm2.TPMAlgECDSA, &tpm2.TPMSSigSchemeECDSA{HashAlg: tpm2.TPMAlgSHA256}),
			},
			CurveID: tpm2.TPMECCNistP256,
			KDF:     tpm2.TPMTKDFScheme{Scheme: tpm2.TPMAlgNull},
		}),
		Unique: tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{}),
	}
}

// createUnder creates and loads a child of parent (authorized by auth()),
// returning the loaded transient object.
func (t *TPM) createUnder(parent object, auth func() tpm2.Session, template tpm2.TPMTPublic) (object, error) {
	created, err := tpm2.Create{ParentHandle: parent.auth(auth()), InPublic: tpm2.New2B(template)}.Execute(t.t)
	if err != nil {
		return object{}, fmt.Errorf("creating a key: %w", err)
	}
	loaded, err := tpm2.Load{
		ParentHandle: parent.auth(auth()),
		InPrivate:    created.OutPrivate,
		InPublic:     created.OutPublic,
	}.Execute(t.t)
	if err != nil {
		return object{}, fmt.Errorf("loading a key: %w", err)
	}
	return object{handle: loaded.ObjectHandle, name: loaded.Name, public: created.OutPublic.Bytes()}, nil
}

// CreateAK creates a new AK under the EK and makes it persistent at h
// (replacing any object there). It returns the AK's bare TPMT_PUBLIC.
func (t *TPM) CreateAK(h tpm2.TPMHandle) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ek, err := t.createEK()
	if err != nil {
		return nil, err
	}
	defer t.flush(ek)
	ak, err := t.createUnder(ek, ekSession, AKTemplate)
	if err != nil {
		return nil, fmt.Errorf("the AK: %w", err)
	}
	defer t.flush(ak)
	p, err := t.persist(ak, h)
	if err != nil {
		return nil, err
	}
	return p.public, nil
}

// PersistentPublic returns the bare TPMT_PUBLIC of the object at h.
func (t *TPM) PersistentPublic(h tpm2.TPMHandle) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, ok := t.persistent(h)
	if !ok {
		return nil, fmt.Errorf("no object at %#x", uint32(h))
	}
	return o.public, nil
}

// ActivateCredential proves that the AK at ak sits beside the EK: the TPM
// returns the credential's secret only if it was made for this EK and the
// AK's name (TPM2_ActivateCredential).
func (t *TPM) ActivateCredential(ak tpm2.TPMHandle, credentialBlob, encryptedSecret []byte) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a, ok := t.persistent(ak)
	if !ok {
		return nil, fmt.Errorf("no AK at %#x", uint32(ak))
	}
	ek, err := t.createEK()
	if err != nil {
		return nil, err
	}
	defer t.flush(ek)
	rsp, err := tpm2.ActivateCredential{
		ActivateHandle: a.auth(tpm2.PasswordAuth(nil)),
		KeyHandle:      ek.auth(ekSession()),
		CredentialBlob: tpm2.TPM2BIDObject{Buffer: credentialBlob},
		Secret:         tpm2.TPM2BEncryptedSecret{Buffer: encryptedSecret},
	}.Execute(t.t)
	if err != nil {
		return nil, fmt.Errorf("activating the credential: %w", err)
	}
	return rsp.CertInfo.Buffer, nil
}

// Extend extends a SHA-256 digest into PCR pcr.
func (t *TPM) Extend(pcr int, digest []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, err := tpm2.PCRExtend{
		PCRHandle: tpm2.AuthHandle{Handle: tpm2.TPMHandle(pcr), Auth: tpm2.PasswordAuth(nil)},
		Digests:   tpm2.TPMLDigestValues{Digests: []tpm2.TPMTHA{{HashAlg: tpm2.TPMAlgSHA256, Digest: digest}}},
	}.Execute(t.t)
	return err
}

func selection(pcrs []int) tpm2.TPMLPCRSelection {
	return tpm2.TPMLPCRSelection{PCRSelections: []tpm2.TPMSPCRSelection{{
		Hash:      tpm2.TPMAlgSHA256,
		PCRSelect: tpm2.PCClientCompatible.PCRs(toUint(pcrs)...),
	}}}
}

func toUint(pcrs []int) []uint {
	out := make([]uint, len(pcrs))
	for i, p := range pcrs {
		out[i] = uint(p)
	}
	return out
}

// ReadPCRs reads SHA-256 PCRs (at most 8 at a time), in the order given.
func (t *TPM) ReadPCRs(pcrs []int) ([][]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	rsp, err := tpm2.PCRRead{PCRSelectionIn: selection(pcrs)}.Execute(t.t)
	if err != nil {
		return nil, fmt.Errorf("reading PCRs: %w", err)
	}
	if len(rsp.PCRValues.Digests) != len(pcrs) {
		return nil, fmt.Errorf("the TPM returned %d PCR values for %d PCRs", len(rsp.PCRValues.Digests), len(pcrs))
	}
	out := make([][]byte, len(pcrs))
	for i, d := range rsp.PCRValues.Digests {
		out[i] = d.Buffer
	}
	return out, nil
}

// Signed is a TPMS_ATTEST, as the TPM returned it, and its TPMT_SIGNATURE.
type Signed struct {
	Attest    []byte `json:"attest"`
	Signature []byte `json:"signature"`
}

// Quote quotes SHA-256 PCRs pcrs over nonce with the AK at ak.
func (t *TPM) Quote(ak tpm2.TPMHandle, nonce []byte, pcrs []int) (Signed, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a, ok := t.persistent(ak)
	if !ok {
		return Signed{}, fmt.Errorf("no AK at %#x", uint32(ak))
	}
	rsp, err := tpm2.Quote{
		SignHandle:     a.auth(tpm2.PasswordAuth(nil)),
		QualifyingData: tpm2.TPM2BData{Buffer: nonce},
		InScheme:       tpm2.TPMTSigScheme{Scheme: tpm2.TPMAlgNull},
		PCRSelect:      selection(pcrs),
	}.Execute(t.t)
	if err != nil {
		return Signed{}, fmt.Errorf("quoting: %w", err)
	}
	return Signed{Attest: rsp.Quoted.Bytes(), Signature: tpm2.Marshal(rsp.Signature)}, nil
}

// NodeKey is a P-256 key that lives in the TPM. It is a crypto.Signer
// (ECDSA with SHA-256 digests, ASN.1 DER signatures), fit for a CSR or TLS.
type NodeKey struct {
	tpm    *TPM
	obj    object
	public *ecdsa.PublicKey
}

// CreateNodeKey creates a node key under the owner's SRK and makes it
// persistent at h (replacing any object there).
func (t *TPM) CreateNodeKey(h tpm2.TPMHandle) (*NodeKey, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	srk, err := t.createSRK()
	if err != nil {
		return nil, err
	}
	defer t.flush(srk)
	key, err := t.createUnder(srk, func() tpm2.Session { return tpm2.PasswordAuth(nil) }, NodeKeyTemplate)
	if err != nil {
		return nil, fmt.Errorf("the node key: %w", err)
	}
	defer t.flush(key)
	p, err := t.persist(key, h)
	if err != nil {
		return nil, err
	}
	return t.nodeKey(p)
}

// LoadNodeKey returns the node key persistent at h.
func (t *TPM) LoadNodeKey(h tpm2.TPMHandle) (*NodeKey, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, ok := t.persistent(h)
	if !ok {
		return nil, fmt.Errorf("no node key at %#x", uint32(h))
	}
	return t.nodeKey(o)
}

func (t *TPM) nodeKey(o object) (*NodeKey, error) {
	pub, err := ECDSAPublic(o.public)
	if err != nil {
		return nil, err
	}
	return &NodeKey{tpm: t, obj: o, public: pub}, nil
}

// ECDSAPublic returns the P-256 key of a bare ECC TPMT_PUBLIC.
func ECDSAPublic(public []byte) (*ecdsa.PublicKey, error) {
	p, err := tpm2.Unmarshal[tpm2.TPMTPublic](public)
	if err != nil {
		return nil, err
	}
	point, err := p.Unique.ECC()
	if err != nil || p.Type != tpm2.TPMAlgECC {
		return nil, errors.New("not an ECC key")
	}
	params, err := p.Parameters.ECCDetail()
	if err != nil || params.CurveID != tpm2.TPMECCNistP256 {
		return nil, errors.New("not a P-256 key")
	}
	raw := make([]byte, 65)
	raw[0] = 4
	if len(point.X.Buffer) > 32 || len(point.Y.Buffer) > 32 {
		return nil, errors.New("a coordinate longer than 32 bytes")
	}
	copy(raw[1+32-len(point.X.Buffer):33], point.X.Buffer)
	copy(raw[33+32-len(point.Y.Buffer):], point.Y.Buffer)
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), raw)
	if err != nil {
		return nil, fmt.Errorf("the point is not on P-256: %w", err)
	}
	return pub, nil
}

// Public implements crypto.Signer.
func (k *NodeKey) Public() crypto.PublicKey { return k.public }

// PublicArea returns the key's bare TPMT_PUBLIC.
func (k *NodeKey) PublicArea() []byte { return bytes.Clone(k.obj.public) }

// Handle returns the key's persistent handle.
func (k *NodeKey) Handle() tpm2.TPMHandle { return k.obj.handle }

// Sign implements crypto.Signer: an ECDSA signature by the TPM over a
// SHA-256 digest, ASN.1 DER encoded. rand is unused (the TPM draws).
func (k *NodeKey) Sign(_ io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	if opts.HashFunc() != crypto.SHA256 || len(digest) != sha256.Size {
		return nil, fmt.Errorf("the node key signs SHA-256 digests only, not %v", opts.HashFunc())
	}
	k.tpm.mu.Lock()
	defer k.tpm.mu.Unlock()
	rsp, err := tpm2.Sign{
		KeyHandle: k.obj.auth(tpm2.PasswordAuth(nil)),
		Digest:    tpm2.TPM2BDigest{Buffer: digest},
		InScheme: tpm2.TPMTSigScheme{
			Scheme:  tpm2.TPMAlgECDSA,
			Details: tpm2.NewTPMUSigScheme(tpm2.TPMAlgECDSA, &tpm2.TPMSSchemeHash{HashAlg: tpm2.TPMAlgSHA256}),
		},
		Validation: tpm2.TPMTTKHashCheck{Tag: tpm2.TPMSTHashCheck, Hierarchy: tpm2.TPMRHNull},
	}.Execute(k.tpm.t)
	if err != nil {
		return nil, fmt.Errorf("signing in the TPM: %w", err)
	}
	sig, err := rsp.Signature.Signature.ECDSA()
	if err != nil {
		return nil, err
	}
	return asn1.Marshal(struct{ R, S *big.Int }{
		new(big.Int).SetBytes(sig.SignatureR.Buffer),
		new(big.Int).SetBytes(sig.SignatureS.Buffer),
	})
}

// Certify has the AK at ak certify the node key (TPM2_Certify) over nonce.
func (t *TPM) Certify(ak tpm2.TPMHandle, key *NodeKey, nonce []byte) (Signed, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a, ok := t.persistent(ak)
	if !ok {
		return Signed{}, fmt.Errorf("no AK at %#x", uint32(ak))
	}
	rsp, err := tpm2.Certify{
		ObjectHandle:   key.obj.auth(tpm2.PasswordAuth(nil)),
		SignHandle:     a.auth(tpm2.PasswordAuth(nil)),
		QualifyingData: tpm2.TPM2BData{Buffer: nonce},
		InScheme:       tpm2.TPMTSigScheme{Scheme: tpm2.TPMAlgNull},
	}.Execute(t.t)
	if err != nil {
		return Signed{}, fmt.Errorf("certifying the node key: %w", err)
	}
	return Signed{Attest: rsp.CertifyInfo.Bytes(), Signature: tpm2.Marshal(rsp.Signature)}, nil
}

var _ crypto.Signer = (*NodeKey)(nil)
