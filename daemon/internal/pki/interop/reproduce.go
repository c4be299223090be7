// Re-production of a document's deterministic bytes in Go: every key from
// the seed (SPKI, pin, PKCS#8, JWK, thumbprint), every signed envelope of a
// positive case re-signed (Ed25519, and P-256 with RFC 6979 nonces), every
// protobuf payload and input decoded and re-marshalled, every release
// manifest re-serialized, and every ES256 token re-signed.

package interop

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"

	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
)

// Reproduction is one byte string that Go re-produces and compares.
type Reproduction struct {
	// Name says what is re-produced, e.g. "key/node-ca" or
	// "envelope/command/signed".
	Name string
	// Check re-produces the bytes and fails when they differ.
	Check func() error
}

// Reproductions lists the re-productions of doc, beyond the byte-exact
// positive cases (pae, dsse-sign) whose check already compares bytes.
func Reproductions(doc *Document, keys *Keyring) []Reproduction {
	var out []Reproduction
	add := func(name string, check func() error) { out = append(out, Reproduction{Name: name, Check: check}) }
	for _, entry := range doc.Keys {
		add("key/"+entry.Label, func() error { return reproduceKey(keys, entry) })
	}
	if doc.Manifest != "" {
		addEnvelope(add, keys, "manifest", doc.Manifest, true)
	}
	for i := range doc.Cases {
		c := &doc.Cases[i]
		if !c.Positive() {
			continue
		}
		in := &input{keys: keys}
		if err := json.Unmarshal(c.Input, &in.members); err != nil {
			add("case/"+c.Name, func() error { return badCase("input is not an object") })
			continue
		}
		// dsse-verify cases sign arbitrary bytes under a command's payload type.
		decoded := c.Kind != "dsse-verify"
		for _, field := range []string{"envelope", "approval", "command"} {
			if s, ok := in.lookup(field); ok {
				addEnvelope(add, keys, c.Name+"/"+field, s, decoded)
			}
		}
		for field, msg := range map[string]func() proto.Message{
			"current":       func() proto.Message { return &agentv1.TrustBundle{} },
			"quorum":        func() proto.Message { return &agentv1.Quorum{} },
			"appliedAccess": func() proto.Message { return &agentv1.AccessSection{} },
		} {
			if s, ok := in.lookup(field); ok {
				b, err := base64.StdEncoding.DecodeString(s)
				add("input/"+c.Name+"/"+field, func() error {
					if err != nil {
						return err
					}
					return remarshal(b, msg())
				})
			}
		}
		if token, ok := in.lookup("token"); ok {
			add("token/"+c.Name, func() error { return reproduceToken(keys, c.Kind, token) })
		}
	}
	return out
}

// ByteExactKinds are the case kinds whose positive check compares
// deterministic bytes itself; they count as re-productions too.
var ByteExactKinds = map[string]bool{"pae": true, "dsse-sign": true}

// addEnvelope adds the re-productions of one envelope in JSON form: its
// signatures and, when decoded, its payload and the envelopes nested in it.
func addEnvelope(add func(string, func() error), keys *Keyring, name, text string, decoded bool) {
	env, err := pki.ParseEnvelopeJSON([]byte(text))
	if err != nil {
		add("envelope/"+name, func() error { return err })
		return
	}
	addParsedEnvelope(add, keys, name, env, func(e *pki.Envelope) []byte { return e.JSON() }, []byte(text), decoded)
}

func addParsedEnvelope(add func(string, func() error), keys *Keyring, name string, env *pki.Envelope,
	encode func(*pki.Envelope) []byte, want []byte, decoded bool) {
	if len(env.Signatures) > 0 {
		add("envelope/"+name, func() error { return resign(keys, env, encode, want) })
	}
	if !decoded {
		return
	}
	if env.PayloadType == pki.PayloadTypeRelease {
		add("payload/"+name, func() error { return reserializeManifest(env.Payload) })
		return
	}
	newMessage, isProto := payloadMessages[env.PayloadType]
	if !isProto {
		return
	}
	add("payload/"+name, func() error { return remarshal(env.Payload, newMessage()) })
	// A JoinResponse carries the trust bundle's envelope in protobuf form.
	if env.PayloadType == pki.PayloadTypeJoinResponse {
		response := &agentv1.JoinResponse{}
		if proto.Unmarshal(env.Payload, response) == nil && response.GetTrust().GetTrustBundle() != nil {
			nested := response.GetTrust().GetTrustBundle()
			wantNested, err := deterministic.Marshal(nested)
			if err == nil {
				addParsedEnvelope(add, keys, name+"/trust_bundle", pki.EnvelopeFromProto(nested),
					func(e *pki.Envelope) []byte { b, _ := deterministic.Marshal(e.Proto()); return b }, wantNested, true)
			}
		}
	}
}

var payloadMessages = map[string]func() proto.Message{
	pki.PayloadTypeJoinResponse:  func() proto.Message { return &agentv1.JoinResponse{} },
	pki.PayloadTypeCommand:       func() proto.Message { return &agentv1.Command{} },
	pki.PayloadTypeNodeSpec:      func() proto.Message { return &agentv1.NodeSpec{} },
	pki.PayloadTypeTrustBundle:   func() proto.Message { return &agentv1.TrustBundle{} },
	pki.PayloadTypeBatchApproval: func() proto.Message { return &agentv1.BatchApproval{} },
	pki.PayloadTypeNodeStatement: func() proto.Message { return &agentv1.NodeStatement{} },
}

var deterministic = proto.MarshalOptions{Deterministic: true}

// remarshal decodes b into m and checks that Go encodes it to the same bytes.
func remarshal(b []byte, m proto.Message) error {
	if err := proto.Unmarshal(b, m); err != nil {
		return fmt.Errorf("does not decode: %w", err)
	}
	again, err := deterministic.Marshal(m)
	if err != nil {
		return err
	}
	if !bytes.Equal(again, b) {
		return fmt.Errorf("Go encodes %x, Rust wrote %x", again, b)
	}
	return nil
}

// resign signs env's payload again with the fixture keys named by its key
// ids, in order, and compares the encoding with want.
func resign(keys *Keyring, env *pki.Envelope, encode func(*pki.Envelope) []byte, want []byte) error {
	signers := make([]crypto.Signer, 0, len(env.Signatures))
	for _, s := range env.Signatures {
		label, found := keys.labelOfPin(s.KeyID)
		if !found {
			return fmt.Errorf("key id %s is no fixture key", s.KeyID)
		}
		signer, err := keys.signer(label)
		if err != nil {
			return err
		}
		signers = append(signers, signer)
	}
	again, err := pki.SignEnvelope(nil, env.PayloadType, env.Payload, signers...)
	if err != nil {
		return err
	}
	if got := encode(again); !bytes.Equal(got, want) {
		return fmt.Errorf("Go signs\n%s\nRust wrote\n%s", got, want)
	}
	return nil
}

// signer returns the private key of label as a crypto.Signer.
func (k *Keyring) signer(label string) (crypto.Signer, error) {
	if k.algs[label] == "ed25519" {
		return k.Ed(label)
	}
	return k.P256(label)
}

// reproduceKey derives one key and compares every encoding of it.
func reproduceKey(keys *Keyring, entry KeyEntry) error {
	signer, err := keys.signer(entry.Label)
	if err != nil {
		return err
	}
	pub, err := pki.PublicKeyOf(signer)
	if err != nil {
		return err
	}
	pkcs8, err := pkcs8Of(signer)
	if err != nil {
		return err
	}
	got := map[string]string{
		"spki":         std(pub.SPKI()),
		"pin":          pub.Pin(),
		"privatePkcs8": std(pkcs8),
	}
	want := map[string]string{"spki": entry.SPKI, "pin": entry.Pin, "privatePkcs8": entry.PrivatePKCS8}
	if ec, isEC := pub.ECDSA(); isEC {
		got["jwk"], want["jwk"] = pki.JWK(ec, pub.Pin()), entry.JWK
		got["jwkThumbprint"], want["jwkThumbprint"] = pki.JWKThumbprint(ec), entry.JWKThumbprint
	}
	for field, w := range want {
		if got[field] != w {
			return fmt.Errorf("%s: Go derives %s, Rust wrote %s", field, got[field], w)
		}
	}
	return nil
}

// reserializeManifest checks that Go writes a manifest as serde_json does.
func reserializeManifest(payload []byte) error {
	var m pki.Manifest
	if err := json.Unmarshal(payload, &m); err != nil {
		return err
	}
	again, err := compactJSON(&m)
	if err != nil {
		return err
	}
	if !bytes.Equal(again, payload) {
		return fmt.Errorf("Go writes %s, Rust wrote %s", again, payload)
	}
	return nil
}

// compactJSON is encoding/json without HTML escaping or a trailing newline.
func compactJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// reproduceToken re-signs an ES256 token (RFC 6979, as the Rust side signs)
// from its claims and compares the compact strings.
func reproduceToken(keys *Keyring, kind, token string) error {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return fmt.Errorf("not a compact JWS")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return err
	}
	var header struct{ Kid string }
	if h, err := base64.RawURLEncoding.DecodeString(parts[0]); err != nil || json.Unmarshal(h, &header) != nil {
		return fmt.Errorf("bad header")
	}
	var claims any
	switch kind {
	case "exec-ticket":
		claims = &pki.ExecTicket{}
	case "workload-token":
		claims = &pki.WorkloadToken{}
	default:
		return fmt.Errorf("no token kind %q", kind)
	}
	if err := json.Unmarshal(payload, claims); err != nil {
		return err
	}
	label, found := keys.labelOfPin(header.Kid)
	if !found {
		return fmt.Errorf("kid %s is no fixture key", header.Kid)
	}
	key, err := keys.P256(label)
	if err != nil {
		return err
	}
	again, err := signES256(key, claims)
	if err != nil {
		return err
	}
	if again != token {
		return fmt.Errorf("Go signs %s, Rust wrote %s", again, token)
	}
	return nil
}

// signES256 signs claims as the Rust side's jws::sign does: header
// {"alg":"ES256","kid":…,"typ":"JWT"}, signature the raw r‖s of an RFC 6979
// ECDSA signature.
func signES256(key *ecdsa.PrivateKey, claims any) (string, error) {
	pub, err := pki.NewPublicKey(&key.PublicKey)
	if err != nil {
		return "", err
	}
	header := `{"alg":"ES256","kid":"` + pub.Pin() + `","typ":"JWT"}`
	payload, err := compactJSON(claims)
	if err != nil {
		return "", err
	}
	input := base64.RawURLEncoding.EncodeToString([]byte(header)) + "." + base64.RawURLEncoding.EncodeToString(payload)
	digest := sha256.Sum256([]byte(input))
	der, err := key.Sign(nil, digest[:], crypto.SHA256)
	if err != nil {
		return "", err
	}
	var sig struct{ R, S *big.Int }
	if _, err := asn1.Unmarshal(der, &sig); err != nil {
		return "", err
	}
	raw := make([]byte, 64)
	sig.R.FillBytes(raw[:32])
	sig.S.FillBytes(raw[32:])
	return input + "." + base64.RawURLEncoding.EncodeToString(raw), nil
}

// pkcs8Of encodes a fixture private key as the Rust side does: PKCS#8 v1
// (with the public key inside the ECPrivateKey) for P-256, and RFC 8410's
// OneAsymmetricKey v2 (with the public key) for Ed25519, which Go's
// MarshalPKCS8PrivateKey does not write.
func pkcs8Of(signer crypto.Signer) ([]byte, error) {
	key, isEd := signer.(ed25519.PrivateKey)
	if !isEd {
		return x509.MarshalPKCS8PrivateKey(signer)
	}
	// SEQUENCE { INTEGER 1, SEQUENCE { OID 1.3.101.112 }, OCTET STRING { OCTET STRING seed }, [1] publicKey }
	out := []byte{0x30, 0x51, 0x02, 0x01, 0x01, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20}
	out = append(out, key.Seed()...)
	out = append(out, 0x81, 0x21, 0x00)
	return append(out, key.Public().(ed25519.PublicKey)...), nil
}
