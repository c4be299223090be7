// DSSE envelopes (docs/formats.md, "DSSE envelopes"): PAE, signing with crypto.Signers,
// threshold verification in the order of the Rust side's pki/src/dsse.rs,
// and the two encodings: protobuf on the wire, JSON in fixtures.

package pki

import (
	"crypto"
	"encoding/json"
	"io"
	"strconv"

	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
)

// The payload types of the signed objects (docs/formats.md, "Payload types").
const (
	PayloadTypeJoinResponse  = "application/vnd.bc.join-response+proto"
	PayloadTypeCommand       = "application/vnd.bc.command+proto"
	PayloadTypeNodeSpec      = "application/vnd.bc.node-spec+proto"
	PayloadTypeTrustBundle   = "application/vnd.bc.trust-bundle+proto"
	PayloadTypeBatchApproval = "application/vnd.bc.batch-approval+proto"
	PayloadTypeNodeStatement = "application/vnd.bc.node-statement+proto"
	PayloadTypeRelease       = "application/vnd.bc.release+json"
)

// PAE returns "DSSEv1" SP len(type) SP type SP len(body) SP body, the bytes
// DSSE signatures cover.
func PAE(payloadType string, payload []byte) []byte {
	out := make([]byte, 0, 32+len(payloadType)+len(payload))
	out = append(out, "DSSEv1 "...)
	out = strconv.AppendInt(out, int64(len(payloadType)), 10)
	out = append(out, ' ')
	out = append(out, payloadType...)
	out = append(out, ' ')
	out = strconv.AppendInt(out, int64(len(payload)), 10)
	out = append(out, ' ')
	return append(out, payload...)
}

// Envelope is a DSSE envelope.
type Envelope struct {
	// PayloadType is the payload's media type.
	PayloadType string
	// Payload is the signed bytes.
	Payload []byte
	// Signatures are over PAE(PayloadType, Payload).
	Signatures []Signature
}

// Signature is one DSSE signature.
type Signature struct {
	// KeyID is the signer's pin.
	KeyID string
	// Sig is the signature: 64 raw bytes (Ed25519) or ASN.1 DER (ECDSA).
	Sig []byte
}

// SignEnvelope signs payload with every signer, in order; see SignMessage
// for rand.
func SignEnvelope(rand io.Reader, payloadType string, payload []byte, signers ...crypto.Signer) (*Envelope, error) {
	env := &Envelope{PayloadType: payloadType, Payload: payload, Signatures: []Signature{}}
	message := PAE(payloadType, payload)
	for _, signer := range signers {
		pub, err := PublicKeyOf(signer)
		if err != nil {
			return nil, err
		}
		sig, err := SignMessage(rand, signer, message)
		if err != nil {
			return nil, err
		}
		env.Signatures = append(env.Signatures, Signature{KeyID: pub.Pin(), Sig: sig})
	}
	return env, nil
}

// JSON returns the envelope's JSON form, byte-identical to the Rust side's
// Envelope::to_json: members payloadType, payload, signatures [{keyid, sig}]
// in that order, standard base64 with padding, no HTML escaping.
func (e *Envelope) JSON() []byte {
	out := []byte(`{"payloadType":`)
	out = appendJSONString(out, e.PayloadType)
	out = append(out, `,"payload":"`...)
	out = append(out, encodeStd(e.Payload)...)
	out = append(out, `","signatures":[`...)
	for i, s := range e.Signatures {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"keyid":`...)
		out = appendJSONString(out, s.KeyID)
		out = append(out, `,"sig":"`...)
		out = append(out, encodeStd(s.Sig)...)
		out = append(out, `"}`...)
	}
	return append(out, "]}"...)
}

// MarshalJSON returns the JSON form. Note that encoding/json escapes '<',
// '>' and '&' in what a Marshaler returns; JSON() does not.
func (e *Envelope) MarshalJSON() ([]byte, error) { return e.JSON(), nil }

// UnmarshalJSON parses the JSON form; see ParseEnvelopeJSON.
func (e *Envelope) UnmarshalJSON(data []byte) error {
	parsed, err := ParseEnvelopeJSON(data)
	if err != nil {
		return err
	}
	*e = *parsed
	return nil
}

// ParseEnvelopeJSON parses the JSON form, refusing (dsse-malformed) anything
// but an object with exactly the members payloadType, payload and signatures
// (each {keyid, sig}), or base64 that is not canonical standard base64.
func ParseEnvelopeJSON(data []byte) (*Envelope, error) {
	obj, err := parseObject(data, true, "payloadType", "payload", "signatures")
	if err != nil {
		return nil, refuseWith(CodeDSSEMalformed, err, "not a DSSE JSON envelope")
	}
	var payloadType, payload string
	var rawSigs []json.RawMessage
	err = obj.requiredAll(map[string]any{"payloadType": &payloadType, "payload": &payload, "signatures": &rawSigs})
	if err != nil {
		return nil, refuseWith(CodeDSSEMalformed, err, "not a DSSE JSON envelope")
	}
	type jsonSig struct{ keyid, sig string }
	sigs := make([]jsonSig, len(rawSigs))
	for i, raw := range rawSigs {
		s, err := parseObject(raw, true, "keyid", "sig")
		if err == nil {
			err = s.requiredAll(map[string]any{"keyid": &sigs[i].keyid, "sig": &sigs[i].sig})
		}
		if err != nil {
			return nil, refuseWith(CodeDSSEMalformed, err, "not a DSSE signature")
		}
	}
	env := &Envelope{PayloadType: payloadType, Signatures: make([]Signature, 0, len(sigs))}
	if env.Payload, err = decodeStd(payload); err != nil {
		return nil, refuse(CodeDSSEMalformed, "payload is not base64")
	}
	for _, s := range sigs {
		sig, err := decodeStd(s.sig)
		if err != nil {
			return nil, refuse(CodeDSSEMalformed, "sig is not base64")
		}
		env.Signatures = append(env.Signatures, Signature{KeyID: s.keyid, Sig: sig})
	}
	return env, nil
}

// Proto returns the envelope as the protocol message.
func (e *Envelope) Proto() *agentv1.Envelope {
	msg := &agentv1.Envelope{PayloadType: e.PayloadType, Payload: e.Payload}
	for _, s := range e.Signatures {
		msg.Signatures = append(msg.Signatures, &agentv1.Signature{Keyid: s.KeyID, Sig: s.Sig})
	}
	return msg
}

// EnvelopeFromProto converts the protocol message.
func EnvelopeFromProto(msg *agentv1.Envelope) *Envelope {
	env := &Envelope{PayloadType: msg.GetPayloadType(), Payload: msg.GetPayload(), Signatures: []Signature{}}
	for _, s := range msg.GetSignatures() {
		env.Signatures = append(env.Signatures, Signature{KeyID: s.GetKeyid(), Sig: s.GetSig()})
	}
	return env
}

// Verify checks the payload type, then the signatures against trusted, and
// returns the payload when at least threshold distinct trusted keys signed
// it (a threshold below 1 counts as 1). Refusals, in this order:
// dsse-payload-type, dsse-unsigned, dsse-bad-signature (a signature under a
// trusted key id that fails; signatures by other key ids are skipped), then
// dsse-unknown-key (no trusted signer at all) or dsse-threshold (too few).
func (e *Envelope) Verify(payloadType string, trusted []*PublicKey, threshold int) ([]byte, error) {
	_, err := e.verifyCount(payloadType, trusted, threshold)
	if err != nil {
		return nil, err
	}
	return e.Payload, nil
}

// verifyCount is Verify that also returns the number of distinct trusted
// signers, which the quorum refusals report.
func (e *Envelope) verifyCount(payloadType string, trusted []*PublicKey, threshold int) (int, error) {
	if e.PayloadType != payloadType {
		return 0, refuse(CodeDSSEPayloadType, "payload type %q, expected %q", e.PayloadType, payloadType)
	}
	if len(e.Signatures) == 0 {
		return 0, refuse(CodeDSSEUnsigned, "the envelope is unsigned")
	}
	message := PAE(e.PayloadType, e.Payload)
	valid := map[int]bool{}
	for _, sig := range e.Signatures {
		i := indexOfPin(trusted, sig.KeyID)
		if i < 0 {
			continue
		}
		if !trusted[i].Verify(message, sig.Sig) {
			return 0, refuse(CodeDSSEBadSignature, "bad signature by %s", sig.KeyID)
		}
		valid[i] = true
	}
	switch n := len(valid); {
	case n >= max(threshold, 1):
		return n, nil
	case n == 0:
		return 0, refuse(CodeDSSEUnknownKey, "no signature by a trusted key")
	default:
		return n, refuse(CodeDSSEThreshold, "%d valid signature(s), %d required", n, threshold)
	}
}

// indexOfPin returns the index of the first key whose pin is keyid, or -1.
func indexOfPin(keys []*PublicKey, keyid string) int {
	for i, k := range keys {
		if k.Pin() == keyid {
			return i
		}
	}
	return -1
}

// decodePayload unmarshals a protobuf payload into m, refusing bytes that do
// not decode (payload-malformed).
func decodePayload(payload []byte, m proto.Message) error {
	if err := proto.Unmarshal(payload, m); err != nil {
		return refuseWith(CodePayloadMalformed, err, "the payload does not decode")
	}
	return nil
}
