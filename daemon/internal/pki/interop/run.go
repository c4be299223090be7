// Runs one case through package pki, exactly as the Rust side's
// fixtures/src/interop/run.rs does: each kind reads its input, calls the
// verifier a consumer would call, and returns the expect object it computed
// or the refusal's code.

package interop

import (
	"bytes"
	"crypto/ecdsa"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
)

// Outcome is what a case produced: the expect object, or a refusal code.
type Outcome struct {
	// Value is the computed expect object (nil on a refusal).
	Value map[string]any
	// Code is the refusal's code (empty on success).
	Code pki.Code
}

// result turns a verifier's result into an outcome: the expect object that
// describe makes of value, or the refusal's code. An error that is not a
// pki refusal is returned as an error.
func result[T any](value T, err error, describe func(T) map[string]any) (Outcome, error) {
	if err == nil {
		return Outcome{Value: describe(value)}, nil
	}
	if code := pki.CodeOf(err); code != "" {
		return Outcome{Code: code}, nil
	}
	return Outcome{}, fmt.Errorf("not a pki refusal: %w", err)
}

// withEnvelope parses text as a JSON envelope and verifies it: a parse
// refusal is the outcome as much as a verification refusal.
func withEnvelope[T any](text string, verify func(*pki.Envelope) (T, error)) (T, error) {
	env, err := pki.ParseEnvelopeJSON([]byte(text))
	if err != nil {
		var zero T
		return zero, err
	}
	return verify(env)
}

// Run runs one case of kind on its input and returns its outcome; a
// *BadCase error means the case itself is malformed.
func Run(k *Keyring, kind string, raw json.RawMessage) (Outcome, error) {
	in := &input{keys: k}
	if err := json.Unmarshal(raw, &in.members); err != nil || in.members == nil {
		return Outcome{}, badCase("input is not an object")
	}
	run, found := runners[kind]
	if !found {
		return Outcome{}, badCase("unknown kind %q", kind)
	}
	return run(in)
}

var runners = map[string]func(*input) (Outcome, error){
	"pae":             runPAE,
	"dsse-sign":       runDSSESign,
	"dsse-verify":     runDSSEVerify,
	"csr":             runCSR,
	"certificate":     runCertificate,
	"join-token":      runJoinToken,
	"join-response":   runJoinResponse,
	"secret-response": runSecretResponse,
	"exec-ticket":     runExecTicket,
	"workload-token":  runWorkloadToken,
	"command":         runCommand,
	"node-spec":       runNodeSpec,
	"trust-bundle":    runTrustBundle,
	"batch-approval":  runBatchApproval,
	"release":         runRelease,
	"node-statement":  runNodeStatement,
}

func runPAE(in *input) (Outcome, error) {
	typ, payload := in.string("payloadType"), in.bytes("payload")
	if in.err != nil {
		return Outcome{}, in.err
	}
	return Outcome{Value: map[string]any{"pae": std(pki.PAE(typ, payload))}}, nil
}

func runDSSESign(in *input) (Outcome, error) {
	key, typ, payload := in.ed25519("key"), in.string("payloadType"), in.bytes("payload")
	if in.err != nil {
		return Outcome{}, in.err
	}
	env, err := pki.SignEnvelope(nil, typ, payload, key)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Value: map[string]any{"envelope": string(env.JSON())}}, nil
}

func runDSSEVerify(in *input) (Outcome, error) {
	text, trusted, typ := in.string("envelope"), in.publics("trusted"), in.string("payloadType")
	threshold := int64(1)
	if in.has("threshold") {
		threshold = in.int("threshold")
	}
	if in.err != nil {
		return Outcome{}, in.err
	}
	payload, err := withEnvelope(text, func(env *pki.Envelope) ([]byte, error) {
		return env.Verify(typ, trusted, int(threshold))
	})
	return result(payload, err, func(p []byte) map[string]any { return map[string]any{"payload": std(p)} })
}

func runCSR(in *input) (Outcome, error) {
	der := in.bytes("csr")
	if in.err != nil {
		return Outcome{}, in.err
	}
	csr, err := pki.ParseCSR(der)
	return result(csr, err, func(c *pki.CSR) map[string]any { return map[string]any{"pin": c.Pin} })
}

func runCertificate(in *input) (Outcome, error) {
	cert, issuer, at, usageName := in.bytes("certificate"), in.bytes("issuer"), in.time("at"), in.string("usage")
	usage, valid := pki.ParseUsage(usageName)
	if !valid {
		in.fail("usage %q", usageName)
	}
	opts := pki.VerifyOptions{Usage: usage, At: at}
	if in.has("dnsName") {
		opts.DNSName = in.string("dnsName")
	}
	if in.err != nil {
		return Outcome{}, in.err
	}
	info, err := pki.VerifyIssued(cert, issuer, opts)
	return result(info, err, func(info *pki.CertificateInfo) map[string]any {
		ips := make([]string, 0, len(info.IPs))
		for _, ip := range info.IPs {
			ips = append(ips, ip.String())
		}
		return map[string]any{
			"commonName":  info.CommonName,
			"uris":        nonNil(info.URIs),
			"dnsNames":    nonNil(info.DNSNames),
			"ips":         ips,
			"pin":         info.Pin,
			"isCa":        info.IsCA,
			"notBeforeMs": info.NotBefore.UnixMilli(),
			"notAfterMs":  info.NotAfter.UnixMilli(),
		}
	})
}

func runJoinToken(in *input) (Outcome, error) {
	key, der, sealed, at := in.p256("key"), in.bytes("csr"), in.string("jwe"), in.int("at")
	if in.err != nil {
		return Outcome{}, in.err
	}
	payload, err := func() (*pki.SealedTokenPayload, error) {
		csr, err := pki.ParseCSR(der)
		if err != nil {
			return nil, err
		}
		return pki.OpenJoinToken(key, sealed, csr.Pin, time.UnixMilli(at))
	}()
	return result(payload, err, func(p *pki.SealedTokenPayload) map[string]any {
		return map[string]any{"token": p.Token, "csr": p.CSR, "iat": p.IAT}
	})
}

func runJoinResponse(in *input) (Outcome, error) {
	key, pin, text := in.public("key"), in.string("csrPin"), in.string("envelope")
	if in.err != nil {
		return Outcome{}, in.err
	}
	response, err := withEnvelope(text, func(env *pki.Envelope) (*agentv1.JoinResponse, error) {
		return pki.VerifyJoinResponse(env, key, pin)
	})
	return result(response, err, DescribeJoinResponse)
}

func runSecretResponse(in *input) (Outcome, error) {
	key, sealed := in.p256("key"), in.string("jwe")
	if in.err != nil {
		return Outcome{}, in.err
	}
	secret, err := pki.OpenSecretResponse(key, sealed)
	return result(secret, err, func(s []byte) map[string]any { return map[string]any{"secret": std(s)} })
}

func runExecTicket(in *input) (Outcome, error) {
	key, token, issuer, node, at := in.p256("key"), in.string("token"), in.string("issuer"), in.string("nodeId"), in.time("at")
	if in.err != nil {
		return Outcome{}, in.err
	}
	claims, err := pki.VerifyExecTicket(token, []*ecdsa.PublicKey{&key.PublicKey}, issuer, node, at)
	return result(claims, err, func(c *pki.ExecTicket) map[string]any { return toMap(c) })
}

func runWorkloadToken(in *input) (Outcome, error) {
	key, token, issuer, audience, at := in.p256("key"), in.string("token"), in.string("issuer"), in.string("audience"), in.time("at")
	if in.err != nil {
		return Outcome{}, in.err
	}
	claims, err := pki.VerifyWorkloadToken(token, []*ecdsa.PublicKey{&key.PublicKey}, issuer, audience, at)
	return result(claims, err, func(c *pki.WorkloadToken) map[string]any { return toMap(c) })
}

// toMap turns a claims struct into its JSON object.
func toMap(v any) map[string]any {
	data, err := json.Marshal(v)
	m := map[string]any{}
	if err == nil {
		err = json.Unmarshal(data, &m)
	}
	if err != nil {
		panic("interop: claims always round-trip through JSON: " + err.Error())
	}
	return m
}

func runCommand(in *input) (Outcome, error) {
	roots, node, at, text := in.publics("roots"), in.string("nodeId"), in.time("at"), in.string("envelope")
	if in.err != nil {
		return Outcome{}, in.err
	}
	command, err := withEnvelope(text, func(env *pki.Envelope) (*agentv1.Command, error) {
		return pki.VerifyCommand(env, roots, node, at)
	})
	return result(command, err, func(c *agentv1.Command) map[string]any { return map[string]any{"command": DescribeCommand(c)} })
}

func runNodeSpec(in *input) (Outcome, error) {
	roots, node, text := in.publics("roots"), in.string("nodeId"), in.string("envelope")
	policy, err := pki.ParseSignedSpecs(in.string("signedSpecs"))
	if err != nil {
		in.fail("%v", err)
	}
	var applied *agentv1.AccessSection
	if !in.has("appliedAccess") {
		in.fail("missing input.appliedAccess")
	} else if !in.isNull("appliedAccess") {
		applied = &agentv1.AccessSection{}
		in.message("appliedAccess", applied)
	}
	if in.err != nil {
		return Outcome{}, in.err
	}
	spec, err := withEnvelope(text, func(env *pki.Envelope) (*agentv1.NodeSpec, error) {
		return pki.VerifySpec(env, roots, node, policy, applied)
	})
	return result(spec, err, func(s *agentv1.NodeSpec) map[string]any {
		return map[string]any{"nodeId": s.GetNodeId(), "generation": s.GetGeneration()}
	})
}

func runTrustBundle(in *input) (Outcome, error) {
	current, text := &agentv1.TrustBundle{}, in.string("envelope")
	in.message("current", current)
	if in.err != nil {
		return Outcome{}, in.err
	}
	bundle, err := withEnvelope(text, func(env *pki.Envelope) (*agentv1.TrustBundle, error) {
		return pki.AcceptTrustBundle(current, env)
	})
	return result(bundle, err, DescribeTrustBundle)
}

func runBatchApproval(in *input) (Outcome, error) {
	quorum, domain, at, text := &agentv1.Quorum{}, in.string("trustDomain"), in.time("at"), in.string("approval")
	in.message("quorum", quorum)
	// The command is the input of the check, not under test: a broken one is
	// a broken case.
	commandEnv, err := pki.ParseEnvelopeJSON([]byte(in.string("command")))
	command := &agentv1.Command{}
	if err == nil {
		err = proto.Unmarshal(commandEnv.Payload, command)
	}
	if err != nil {
		in.fail("input.command: %v", err)
	}
	if in.err != nil {
		return Outcome{}, in.err
	}
	batch, err := withEnvelope(text, func(env *pki.Envelope) (*agentv1.BatchApproval, error) {
		return pki.VerifyBatchApproval(env, quorum, domain, commandEnv, command, at)
	})
	return result(batch, err, func(b *agentv1.BatchApproval) map[string]any { return map[string]any{"batchId": b.GetBatchId()} })
}

func runRelease(in *input) (Outcome, error) {
	policy := pki.ReleasePolicy{Keys: in.publics("keys"), Threshold: int(in.int("threshold")), MinSequence: uint64(in.int("minSequence")),
		InstalledSequence: uint64(in.int("installedSequence"))}
	os, arch, artifact, text := in.string("os"), in.string("arch"), in.bytes("artifact"), in.string("envelope")
	at := in.int("at")
	if in.err != nil {
		return Outcome{}, in.err
	}
	manifest, err := withEnvelope(text, func(env *pki.Envelope) (*pki.Manifest, error) {
		return pki.VerifyRelease(env, policy, os, arch, artifact, time.UnixMilli(at))
	})
	return result(manifest, err, func(m *pki.Manifest) map[string]any {
		return map[string]any{"version": m.Version, "sequence": m.Sequence}
	})
}

func runNodeStatement(in *input) (Outcome, error) {
	key, node, body, text := in.public("key"), in.string("nodeId"), in.string("body"), in.string("envelope")
	if in.err != nil {
		return Outcome{}, in.err
	}
	statement, err := withEnvelope(text, func(env *pki.Envelope) (*agentv1.NodeStatement, error) {
		s, err := pki.VerifyStatement(env, key, node)
		if err == nil && pki.StatementBodyName(s) != body {
			return nil, &pki.Error{Code: pki.CodeStatementKind, Reason: "statement body " + pki.StatementBodyName(s)}
		}
		return s, err
	})
	return result(statement, err, func(s *agentv1.NodeStatement) map[string]any {
		return map[string]any{"nodeId": s.GetNodeId(), "bootId": s.GetBootId(), "atMs": s.GetAtMs(), "body": body}
	})
}

// CheckCase runs c and compares its outcome with the case's expectation.
func CheckCase(k *Keyring, c *Case) error {
	out, err := Run(k, c.Kind, c.Input)
	switch {
	case err != nil:
		return err
	case !c.Positive() && out.Code != pki.Code(c.Error):
		return fmt.Errorf("expected %s, got %s", c.Error, describeOutcome(out))
	case !c.Positive():
		return nil
	case out.Code != "":
		return fmt.Errorf("expected success, got %s", out.Code)
	}
	want, err := normalize(c.Expect)
	if err != nil {
		return badCase("expect: %v", err)
	}
	gotJSON, err := json.Marshal(out.Value)
	if err != nil {
		return err
	}
	got, err := normalize(gotJSON)
	if err != nil {
		return err
	}
	if !reflect.DeepEqual(want, got) {
		return fmt.Errorf("expected %s, got %s", c.Expect, gotJSON)
	}
	return nil
}

func describeOutcome(o Outcome) string {
	if o.Code != "" {
		return string(o.Code)
	}
	return "success"
}

// normalize parses JSON with numbers kept as their text, for comparison.
func normalize(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}
