// Native fuzz targets of the parsers of untrusted bytes in this package: the
// DSSE envelope in JSON and in protobuf, the JWE (a sealed join token) and
// JWS (an exec ticket) compact forms, the release manifest, and the two
// parsers of the unauthenticated Join path, the CSR and the certificate
// verified against the node CA. Each checks a property beyond "no panic":
// every refusal carries one of pki's codes, and what parses re-encodes to
// what parses the same. The seeds are the fixture cases of
// testdata/interop.json and testdata/release/release.json (and the DER of
// testdata/daemon/daemon.json's CSR and testdata/tpm's EK certificates);
// `cargo xtask fuzz` runs them (docs/harness.md, "Fuzzing"), and the Rust
// targets in fuzz/ fuzz the same parsers in pki.

package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"bcd/internal/proto/agentv1"
	"bcd/internal/refusal"
	"google.golang.org/protobuf/proto"
)

// The fixture seed and time the targets verify at (testdata/README.md).
const (
	fuzzSeed   = "bc-interop-v1"
	fuzzAsOfMs = 1_767_225_600_000
)

// seedInputs adds to f the string member field of the input of every case
// of kind in the fixture document at path.
func seedInputs(f *testing.F, path, kind, field string) {
	data, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	var doc struct {
		Cases []struct {
			Kind  string                     `json:"kind"`
			Input map[string]json.RawMessage `json:"input"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		f.Fatal(err)
	}
	for _, c := range doc.Cases {
		var s string
		if c.Kind == kind && json.Unmarshal(c.Input[field], &s) == nil {
			f.Add([]byte(s))
		}
	}
}

// mustBeRefusal fails unless err is nil or a refusal with one of pki's codes.
func mustBeRefusal(t *testing.T, err error) {
	t.Helper()
	var r *Error
	if err == nil {
		return
	}
	if !errors.As(err, &r) {
		t.Fatalf("not a refusal: %v", err)
	}
	if _, known := refusal.Lookup(r.Code); !known {
		t.Fatalf("a refusal without a known code: %v", err)
	}
}

func FuzzEnvelopeJSON(f *testing.F) {
	seedInputs(f, "../../../testdata/interop.json", "dsse-verify", "envelope")
	trusted := []*PublicKey{mustPublic(f, DeriveEd25519(fuzzSeed, "command-root/0").Public())}
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := ParseEnvelopeJSON(data)
		mustBeRefusal(t, err)
		if err != nil {
			return
		}
		// What parses re-encodes to the canonical form, which parses to the same envelope.
		again, err := ParseEnvelopeJSON(env.JSON())
		if err != nil || !bytes.Equal(again.JSON(), env.JSON()) {
			t.Fatalf("the re-encoding does not round-trip: %v", err)
		}
		_, err = env.Verify(PayloadTypeCommand, trusted, 1)
		mustBeRefusal(t, err)
	})
}

func FuzzEnvelopeProto(f *testing.F) {
	f.Add(envelopeSeed(f))
	trusted := []*PublicKey{mustPublic(f, DeriveEd25519(fuzzSeed, "command-root/0").Public())}
	f.Fuzz(func(t *testing.T, data []byte) {
		msg := &agentv1.Envelope{}
		if proto.Unmarshal(data, msg) != nil {
			return
		}
		env := EnvelopeFromProto(msg)
		wire, err := proto.Marshal(env.Proto())
		if err != nil {
			t.Fatal(err)
		}
		back := &agentv1.Envelope{}
		if err := proto.Unmarshal(wire, back); err != nil || !bytes.Equal(EnvelopeFromProto(back).JSON(), env.JSON()) {
			t.Fatalf("the protobuf re-encoding does not round-trip: %v", err)
		}
		payload, err := env.Verify(PayloadTypeCommand, trusted, 1)
		mustBeRefusal(t, err)
		if err == nil {
			mustBeRefusal(t, decodePayload(payload, &agentv1.Command{}))
		}
	})
}

// envelopeSeed is a signed command envelope in protobuf, a seed.
func envelopeSeed(f *testing.F) []byte {
	env, err := SignEnvelope(nil, PayloadTypeCommand, []byte{0x0a, 0x01, 'c'}, DeriveEd25519(fuzzSeed, "command-root/0"))
	if err != nil {
		f.Fatal(err)
	}
	wire, err := proto.Marshal(env.Proto())
	if err != nil {
		f.Fatal(err)
	}
	return wire
}

func mustPublic(f *testing.F, key any) *PublicKey {
	pub, err := NewPublicKey(key)
	if err != nil {
		f.Fatal(err)
	}
	return pub
}

func FuzzJWE(f *testing.F) {
	seedInputs(f, "../../../testdata/interop.json", "join-token", "jwe")
	recipient := DeriveP256(fuzzSeed, "join-encryption")
	csrPin := mustPublic(f, &DeriveP256(fuzzSeed, "node/0").PublicKey).Pin()
	f.Fuzz(func(t *testing.T, data []byte) {
		payload, err := OpenJoinToken(recipient, string(data), csrPin, time.UnixMilli(fuzzAsOfMs))
		mustBeRefusal(t, err)
		if err != nil {
			return
		}
		// What opens is bound to the CSR it was presented with, and its payload re-reads the same.
		again, err := parseSealedTokenPayload(payload.JSON())
		if payload.CSR != csrPin || err != nil || *again != *payload {
			t.Fatalf("opened %+v, re-read %+v (%v)", payload, again, err)
		}
	})
}

func FuzzJWS(f *testing.F) {
	seedInputs(f, "../../../testdata/interop.json", "exec-ticket", "token")
	issuer := []*ecdsa.PublicKey{&DeriveP256(fuzzSeed, "tunnels-issuer").PublicKey}
	const name = "https://compute.dev.local/tunnels"
	at := time.UnixMilli(fuzzAsOfMs)
	f.Fuzz(func(t *testing.T, data []byte) {
		ticket, err := VerifyExecTicket(string(data), issuer, name, "node_0", at)
		mustBeRefusal(t, err)
		if err == nil && (ticket.Iss != name || ticket.Aud != "bcd:node_0" || ticket.Op != "console") {
			t.Fatalf("accepted a ticket that is not for us: %+v", ticket)
		}
	})
}

func FuzzManifest(f *testing.F) {
	seedInputs(f, "../../../testdata/release/release.json", "release", "envelope")
	f.Fuzz(func(t *testing.T, data []byte) {
		// The manifest is the payload of a release envelope; seeds are whole envelopes.
		if env, err := ParseEnvelopeJSON(data); err == nil {
			data = env.Payload
		}
		m, err := parseManifest(data)
		if err != nil {
			return
		}
		// What parses marshals to JSON that parses to the same manifest.
		text, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		again, err := parseManifest(text)
		if err != nil || again.Version != m.Version || again.Sequence != m.Sequence || len(again.Artifacts) != len(m.Artifacts) {
			t.Fatalf("the manifest does not round-trip: %v", err)
		}
		for i := range m.Artifacts {
			if again.Artifacts[i] != m.Artifacts[i] {
				t.Fatalf("artifact %d does not round-trip", i)
			}
		}
	})
}

// interopDER returns the certificates of testdata/interop.json by name, and
// the DER of the member field (standard base64) of every case of kind.
func interopDER(f *testing.F, kind, field string) (map[string][]byte, [][]byte) {
	data, err := os.ReadFile("../../../testdata/interop.json")
	if err != nil {
		f.Fatal(err)
	}
	var doc struct {
		Certificates map[string][]byte `json:"certificates"`
		Cases        []struct {
			Kind  string                     `json:"kind"`
			Input map[string]json.RawMessage `json:"input"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		f.Fatal(err)
	}
	var inputs [][]byte
	for _, c := range doc.Cases {
		var der []byte
		if c.Kind == kind && json.Unmarshal(c.Input[field], &der) == nil {
			inputs = append(inputs, der)
		}
	}
	return doc.Certificates, inputs
}

// mustHaveCode fails unless err is nil or a refusal with one of codes.
func mustHaveCode(t *testing.T, err error, codes ...Code) {
	t.Helper()
	mustBeRefusal(t, err)
	if err == nil {
		return
	}
	for _, c := range codes {
		if CodeOf(err) == c {
			return
		}
	}
	t.Fatalf("refused with %q, not one of %v: %v", CodeOf(err), codes, err)
}

func FuzzParseCSR(f *testing.F) {
	certs, inputs := interopDER(f, "csr", "csr")
	for _, der := range append(inputs, certs["csr0"], certs["csr1"]) {
		f.Add(der)
	}
	data, err := os.ReadFile("../../../testdata/daemon/daemon.json")
	if err != nil {
		f.Fatal(err)
	}
	var daemon struct {
		CSR []byte `json:"csr"`
	}
	if err := json.Unmarshal(data, &daemon); err != nil {
		f.Fatal(err)
	}
	f.Add(daemon.CSR)
	f.Fuzz(func(t *testing.T, data []byte) {
		csr, err := ParseCSR(data)
		mustHaveCode(t, err, CodeCSRMalformed, CodeCSRSignature)
		if err != nil {
			return
		}
		// The key re-encodes to exactly the SPKI it came from, and the
		// self-signature is over exactly the CertificationRequestInfo of the
		// input (split here with encoding/asn1, not the reader ParseCSR uses).
		var req struct {
			Info      asn1.RawValue
			Algorithm asn1.RawValue
			Signature asn1.BitString
		}
		var info struct{ Version, Subject, SPKI, Attributes asn1.RawValue }
		if rest, err := asn1.Unmarshal(data, &req); err != nil || len(rest) != 0 {
			t.Fatalf("accepted what encoding/asn1 does not split: %v", err)
		}
		if rest, err := asn1.Unmarshal(req.Info.FullBytes, &info); err != nil || len(rest) != 0 {
			t.Fatalf("accepted an info encoding/asn1 does not split: %v", err)
		}
		spki, err := x509.MarshalPKIXPublicKey(csr.PublicKey)
		if err != nil || !bytes.Equal(spki, info.SPKI.FullBytes) || !bytes.Equal(csr.SPKI, spki) || csr.Pin != PinSPKI(spki) {
			t.Fatalf("the key re-encodes to %x, came from %x (%v)", spki, info.SPKI.FullBytes, err)
		}
		digest := sha256.Sum256(req.Info.FullBytes)
		if !ecdsa.VerifyASN1(csr.PublicKey, digest[:], req.Signature.Bytes) || req.Signature.BitLength%8 != 0 {
			t.Fatal("accepted a CSR whose self-signature does not verify")
		}
	})
}

func FuzzCertificate(f *testing.F) {
	certs, inputs := interopDER(f, "certificate", "certificate")
	for _, name := range []string{"nodeCa", "servingCa", "serving", "node0"} {
		inputs = append(inputs, certs[name])
	}
	for _, name := range []string{"ek-cert.der", "ek-root.der"} {
		der, err := os.ReadFile("../../../testdata/tpm/" + name)
		if err != nil {
			f.Fatal(err)
		}
		inputs = append(inputs, der)
	}
	for _, der := range inputs {
		f.Add(der)
	}
	caDER := certs["nodeCa"]
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		f.Fatal(err)
	}
	at := time.UnixMilli(fuzzAsOfMs)
	f.Fuzz(func(t *testing.T, data []byte) {
		described, derr := DescribeCertificate(data)
		mustHaveCode(t, derr, CodeCertMalformed)
		info, err := VerifyIssued(data, caDER, VerifyOptions{Usage: UsageClient, At: at})
		mustHaveCode(t, err, CodeCertMalformed, CodeCertChain, CodeCertValidity)
		if err != nil {
			return
		}
		// What verifies says what DescribeCertificate says of it.
		if derr != nil {
			t.Fatalf("verified, but does not describe: %v", derr)
		}
		if info.CommonName != described.CommonName || !bytes.Equal(info.Serial, described.Serial) ||
			!bytes.Equal(info.SPKI, described.SPKI) || !info.NotBefore.Equal(described.NotBefore) ||
			!info.NotAfter.Equal(described.NotAfter) || info.IsCA || len(info.URIs) != len(described.URIs) {
			t.Fatalf("verified %+v, described %+v", info, described)
		}
		// It names the CA as its issuer, byte for byte, and the CA's key signed
		// exactly its TBSCertificate; it is a client certificate valid now.
		cert := info.Certificate
		digest := sha256.Sum256(cert.RawTBSCertificate)
		if !bytes.Equal(cert.RawIssuer, ca.RawSubject) ||
			!ecdsa.VerifyASN1(ca.PublicKey.(*ecdsa.PublicKey), digest[:], cert.Signature) {
			t.Fatal("verified a certificate the CA did not sign")
		}
		if at.Before(info.NotBefore) || at.After(info.NotAfter) {
			t.Fatalf("verified outside its validity %v..%v", info.NotBefore, info.NotAfter)
		}
	})
}
