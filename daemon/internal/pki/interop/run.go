// Runs one case through package pki, exactly as the Rust side's
// fixtures/src/interop/run.rs does: each kind reads its input, calls the
// verifier a consumer would call, and returns the expect object it computed
// or the refusal's code.

package interop

import (
	"bytes"
	"crypto/ecdsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"
	"unicode/utf8"

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

// BadCase is a malformed case: a bug in the fixture file, not a refusal.
type BadCase struct{ Reason string }

func (e *BadCase) Error() string { return "malformed case: " + e.Reason }

func badCase(format string, args ...any) error { return &BadCase{Reason: fmt.Sprintf(format, args...)} }

// refused turns a pki error into an outcome; any other error is returned as is.
func refused(err error) (Outcome, error) {
	if code := pki.CodeOf(err); code != "" {
		return Outcome{Code: code}, nil
	}
	return Outcome{}, fmt.Errorf("not a pki refusal: %w", err)
}

// ok wraps a computed expect object.
func ok(value map[string]any) (Outcome, error) { return Outcome{Value: value}, nil }

// input reads the members of a case's input.
type input map[string]json.RawMessage

func (in input) field(name string) (json.RawMessage, error) {
	raw, ok := in[name]
	if !ok {
		return nil, badCase("missing input.%s", name)
	}
	return raw, nil
}

func (in input) string(name string) (string, error) {
	raw, err := in.field(name)
	if err != nil {
		return "", err
	}
	var s string
	if string(raw) == "null" || json.Unmarshal(raw, &s) != nil {
		return "", badCase("input.%s is not a string", name)
	}
	return s, nil
}

func (in input) int(name string) (int64, error) {
	raw, err := in.field(name)
	if err != nil {
		return 0, err
	}
	var n int64
	if string(raw) == "null" || json.Unmarshal(raw, &n) != nil {
		return 0, badCase("input.%s is not an integer", name)
	}
	return n, nil
}

func (in input) time(name string) (time.Time, error) {
	ms, err := in.int(name)
	return time.UnixMilli(ms), err
}

func (in input) bytes(name string) ([]byte, error) {
	s, err := in.string(name)
	if err != nil {
		return nil, err
	}
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, badCase("input.%s is not base64", name)
	}
	return b, nil
}

func (in input) labels(name string) ([]string, error) {
	raw, err := in.field(name)
	if err != nil {
		return nil, err
	}
	var labels []string
	if string(raw) == "null" || json.Unmarshal(raw, &labels) != nil {
		return nil, badCase("input.%s is not an array of strings", name)
	}
	return labels, nil
}

func (in input) message(name string, m proto.Message) error {
	b, err := in.bytes(name)
	if err != nil {
		return err
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return badCase("input.%s: %v", name, err)
	}
	return nil
}

// publics returns the public keys of the labels in input.name.
func (k *Keyring) publics(in input, name string) ([]*pki.PublicKey, error) {
	labels, err := in.labels(name)
	if err != nil {
		return nil, err
	}
	keys := make([]*pki.PublicKey, 0, len(labels))
	for _, l := range labels {
		key, err := k.Public(l)
		if err != nil {
			return nil, badCase("%v", err)
		}
		keys = append(keys, key)
	}
	return keys, nil
}

func (k *Keyring) public(in input, name string) (*pki.PublicKey, error) {
	label, err := in.string(name)
	if err != nil {
		return nil, err
	}
	key, err := k.Public(label)
	if err != nil {
		return nil, badCase("%v", err)
	}
	return key, nil
}

func (k *Keyring) p256(in input, name string) (*pki.PublicKey, *ecdsa.PrivateKey, error) {
	label, err := in.string(name)
	if err != nil {
		return nil, nil, err
	}
	key, err := k.P256(label)
	if err != nil {
		return nil, nil, badCase("%v", err)
	}
	pub, err := pki.NewPublicKey(&key.PublicKey)
	return pub, key, err
}

// Run runs one case of kind on its input and returns its outcome; a
// *BadCase error means the case itself is malformed.
func Run(k *Keyring, kind string, raw json.RawMessage) (Outcome, error) {
	var in input
	if err := json.Unmarshal(raw, &in); err != nil {
		return Outcome{}, badCase("input is not an object")
	}
	run, found := runners[kind]
	if !found {
		return Outcome{}, badCase("unknown kind %q", kind)
	}
	return run(k, in)
}

var runners = map[string]func(*Keyring, input) (Outcome, error){
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

// envelope parses input.name as a JSON envelope; a refusal is an outcome.
func envelope(in input, name string) (*pki.Envelope, error) {
	s, err := in.string(name)
	if err != nil {
		return nil, err
	}
	return pki.ParseEnvelopeJSON([]byte(s))
}

func std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func runPAE(_ *Keyring, in input) (Outcome, error) {
	typ, err := in.string("payloadType")
	if err != nil {
		return Outcome{}, err
	}
	payload, err := in.bytes("payload")
	if err != nil {
		return Outcome{}, err
	}
	return ok(map[string]any{"pae": std(pki.PAE(typ, payload))})
}

func runDSSESign(k *Keyring, in input) (Outcome, error) {
	label, err := in.string("key")
	if err != nil {
		return Outcome{}, err
	}
	key, err := k.Ed(label)
	if err != nil {
		return Outcome{}, badCase("%v", err)
	}
	typ, err := in.string("payloadType")
	if err != nil {
		return Outcome{}, err
	}
	payload, err := in.bytes("payload")
	if err != nil {
		return Outcome{}, err
	}
	env, err := pki.SignEnvelope(nil, typ, payload, key)
	if err != nil {
		return Outcome{}, err
	}
	return ok(map[string]any{"envelope": string(env.JSON())})
}

func runDSSEVerify(k *Keyring, in input) (Outcome, error) {
	env, err := envelope(in, "envelope")
	if err != nil {
		return refused(err)
	}
	threshold, err := in.int("threshold")
	if err != nil {
		threshold = 1
	}
	trusted, err := k.publics(in, "trusted")
	if err != nil {
		return Outcome{}, err
	}
	typ, err := in.string("payloadType")
	if err != nil {
		return Outcome{}, err
	}
	payload, err := env.Verify(typ, trusted, int(threshold))
	if err != nil {
		return refused(err)
	}
	return ok(map[string]any{"payload": std(payload)})
}

func runCSR(_ *Keyring, in input) (Outcome, error) {
	der, err := in.bytes("csr")
	if err != nil {
		return Outcome{}, err
	}
	csr, err := pki.ParseCSR(der)
	if err != nil {
		return refused(err)
	}
	return ok(map[string]any{"pin": csr.Pin})
}

func runCertificate(_ *Keyring, in input) (Outcome, error) {
	cert, err := in.bytes("certificate")
	if err != nil {
		return Outcome{}, err
	}
	issuer, err := in.bytes("issuer")
	if err != nil {
		return Outcome{}, err
	}
	at, err := in.time("at")
	if err != nil {
		return Outcome{}, err
	}
	usageName, err := in.string("usage")
	if err != nil {
		return Outcome{}, err
	}
	usage, valid := pki.ParseUsage(usageName)
	if !valid {
		return Outcome{}, badCase("usage %q", usageName)
	}
	opts := pki.VerifyOptions{Usage: usage, At: at}
	if _, has := in["dnsName"]; has {
		if opts.DNSName, err = in.string("dnsName"); err != nil {
			return Outcome{}, err
		}
	}
	info, err := pki.VerifyIssued(cert, issuer, opts)
	if err != nil {
		return refused(err)
	}
	ips := make([]string, 0, len(info.IPs))
	for _, ip := range info.IPs {
		ips = append(ips, ip.String())
	}
	return ok(map[string]any{
		"commonName":  info.CommonName,
		"uris":        nonNil(info.URIs),
		"dnsNames":    nonNil(info.DNSNames),
		"ips":         ips,
		"pin":         info.Pin,
		"isCa":        info.IsCA,
		"notBeforeMs": info.NotBefore.UnixMilli(),
		"notAfterMs":  info.NotAfter.UnixMilli(),
	})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func runJoinToken(k *Keyring, in input) (Outcome, error) {
	_, key, err := k.p256(in, "key")
	if err != nil {
		return Outcome{}, err
	}
	der, err := in.bytes("csr")
	if err != nil {
		return Outcome{}, err
	}
	csr, err := pki.ParseCSR(der)
	if err != nil {
		return refused(err)
	}
	sealed, err := in.string("jwe")
	if err != nil {
		return Outcome{}, err
	}
	p, err := pki.OpenJoinToken(key, sealed, csr.Pin)
	if err != nil {
		return refused(err)
	}
	return ok(map[string]any{"token": p.Token, "csr": p.CSR, "iat": p.IAT})
}

func runJoinResponse(k *Keyring, in input) (Outcome, error) {
	key, err := k.public(in, "key")
	if err != nil {
		return Outcome{}, err
	}
	pin, err := in.string("csrPin")
	if err != nil {
		return Outcome{}, err
	}
	env, err := envelope(in, "envelope")
	if err != nil {
		return refused(err)
	}
	r, err := pki.VerifyJoinResponse(env, key, pin)
	if err != nil {
		return refused(err)
	}
	return ok(DescribeJoinResponse(r))
}

// DescribeJoinResponse is the expect object of a verified JoinResponse.
func DescribeJoinResponse(r *agentv1.JoinResponse) map[string]any {
	chain := make([]string, 0, len(r.GetCertificateChain()))
	for _, c := range r.GetCertificateChain() {
		chain = append(chain, std(c))
	}
	return map[string]any{
		"nodeId":           r.GetNodeId(),
		"trustDomain":      r.GetTrustDomain(),
		"poolId":           r.GetPoolId(),
		"csrPin":           r.GetCsrPin(),
		"issuedAtMs":       r.GetIssuedAtMs(),
		"certificateChain": chain,
		"commandRoots":     keyids(r.GetTrust().GetCommandRoots()),
		"hasTrustBundle":   r.GetTrust().GetTrustBundle() != nil,
		"gateway": map[string]any{
			"url":              r.GetGateway().GetUrl(),
			"serverName":       r.GetGateway().GetServerName(),
			"servingCaSpkiPin": r.GetGateway().GetServingCaSpkiPin(),
		},
	}
}

func keyids(keys []*agentv1.PublicKey) []string {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k.GetKeyid())
	}
	return out
}

func runSecretResponse(k *Keyring, in input) (Outcome, error) {
	_, key, err := k.p256(in, "key")
	if err != nil {
		return Outcome{}, err
	}
	sealed, err := in.string("jwe")
	if err != nil {
		return Outcome{}, err
	}
	secret, err := pki.OpenSecretResponse(key, sealed)
	if err != nil {
		return refused(err)
	}
	return ok(map[string]any{"secret": std(secret)})
}

// tokenInput reads the members both token kinds share.
func tokenInput(k *Keyring, in input) (token, issuer string, trusted []*ecdsa.PublicKey, at time.Time, err error) {
	_, key, err := k.p256(in, "key")
	if err != nil {
		return
	}
	trusted = []*ecdsa.PublicKey{&key.PublicKey}
	if token, err = in.string("token"); err != nil {
		return
	}
	if issuer, err = in.string("issuer"); err != nil {
		return
	}
	at, err = in.time("at")
	return
}

func runExecTicket(k *Keyring, in input) (Outcome, error) {
	token, issuer, trusted, at, err := tokenInput(k, in)
	if err != nil {
		return Outcome{}, err
	}
	node, err := in.string("nodeId")
	if err != nil {
		return Outcome{}, err
	}
	claims, err := pki.VerifyExecTicket(token, trusted, issuer, node, at)
	if err != nil {
		return refused(err)
	}
	return ok(toMap(claims))
}

func runWorkloadToken(k *Keyring, in input) (Outcome, error) {
	token, issuer, trusted, at, err := tokenInput(k, in)
	if err != nil {
		return Outcome{}, err
	}
	audience, err := in.string("audience")
	if err != nil {
		return Outcome{}, err
	}
	claims, err := pki.VerifyWorkloadToken(token, trusted, issuer, audience, at)
	if err != nil {
		return refused(err)
	}
	return ok(toMap(claims))
}

// toMap turns a claims struct into its JSON object.
func toMap(v any) map[string]any {
	data, err := json.Marshal(v)
	if err != nil {
		panic("interop: claims always marshal: " + err.Error())
	}
	m := map[string]any{}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		panic("interop: claims always unmarshal: " + err.Error())
	}
	return m
}

func runCommand(k *Keyring, in input) (Outcome, error) {
	roots, err := k.publics(in, "roots")
	if err != nil {
		return Outcome{}, err
	}
	node, err := in.string("nodeId")
	if err != nil {
		return Outcome{}, err
	}
	at, err := in.time("at")
	if err != nil {
		return Outcome{}, err
	}
	env, err := envelope(in, "envelope")
	if err != nil {
		return refused(err)
	}
	c, err := pki.VerifyCommand(env, roots, node, at)
	if err != nil {
		return refused(err)
	}
	return ok(map[string]any{"command": DescribeCommand(c)})
}

// DescribeCommand is the expect.command object of a command.
func DescribeCommand(c *agentv1.Command) map[string]any {
	return map[string]any{
		"id":            c.GetId(),
		"nodeId":        c.GetNodeId(),
		"kind":          c.GetKind(),
		"params":        lossyUTF8(c.GetParams()),
		"notAfterMs":    c.GetNotAfterMs(),
		"minGeneration": c.GetMinGeneration(),
		"retrySafe":     c.GetRetrySafe(),
		"destructive":   c.GetDestructive(),
		"batch":         c.GetBatch(),
		"issuedAtMs":    c.GetIssuedAtMs(),
	}
}

// lossyUTF8 decodes b as Rust's String::from_utf8_lossy does: each maximal
// ill-formed subsequence becomes one U+FFFD.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var out []byte
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r != utf8.RuneError || size > 1 {
			out = append(out, b[:size]...)
			b = b[size:]
			continue
		}
		out = append(out, "\uFFFD"...)
		b = b[maximalSubpart(b):]
	}
	return string(out)
}

// maximalSubpart returns the length of the longest prefix of b (at least 1)
// that starts a well-formed UTF-8 sequence, b being ill-formed at its start.
func maximalSubpart(b []byte) int {
	lo, hi := byte(0x80), byte(0xBF)
	var need int
	switch c := b[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for i := 1; i <= need && i < len(b); i++ {
		if b[i] < lo || b[i] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
		n++
	}
	return n
}

func runNodeSpec(k *Keyring, in input) (Outcome, error) {
	roots, err := k.publics(in, "roots")
	if err != nil {
		return Outcome{}, err
	}
	node, err := in.string("nodeId")
	if err != nil {
		return Outcome{}, err
	}
	policyName, err := in.string("signedSpecs")
	if err != nil {
		return Outcome{}, err
	}
	policy, err := pki.ParseSignedSpecs(policyName)
	if err != nil {
		return Outcome{}, badCase("%v", err)
	}
	raw, err := in.field("appliedAccess")
	if err != nil {
		return Outcome{}, err
	}
	var applied *agentv1.AccessSection
	if string(raw) != "null" {
		applied = &agentv1.AccessSection{}
		if err := in.message("appliedAccess", applied); err != nil {
			return Outcome{}, err
		}
	}
	env, err := envelope(in, "envelope")
	if err != nil {
		return refused(err)
	}
	s, err := pki.VerifySpec(env, roots, node, policy, applied)
	if err != nil {
		return refused(err)
	}
	return ok(map[string]any{"nodeId": s.GetNodeId(), "generation": s.GetGeneration()})
}

func runTrustBundle(_ *Keyring, in input) (Outcome, error) {
	current := &agentv1.TrustBundle{}
	if err := in.message("current", current); err != nil {
		return Outcome{}, err
	}
	env, err := envelope(in, "envelope")
	if err != nil {
		return refused(err)
	}
	b, err := pki.AcceptTrustBundle(current, env)
	if err != nil {
		return refused(err)
	}
	return ok(DescribeTrustBundle(b))
}

// DescribeTrustBundle is the expect object of an accepted trust bundle.
func DescribeTrustBundle(b *agentv1.TrustBundle) map[string]any {
	return map[string]any{
		"trustDomain":  b.GetTrustDomain(),
		"sequence":     b.GetSequence(),
		"commandRoots": keyids(b.GetCommandRoots()),
		"approvers":    keyids(b.GetQuorum().GetApprovers()),
		"threshold":    b.GetQuorum().GetThreshold(),
	}
}

func runBatchApproval(_ *Keyring, in input) (Outcome, error) {
	quorum := &agentv1.Quorum{}
	if err := in.message("quorum", quorum); err != nil {
		return Outcome{}, err
	}
	commandEnv, err := envelope(in, "command")
	if errors.As(err, new(*pki.Error)) {
		return Outcome{}, badCase("input.command: %v", err)
	} else if err != nil {
		return Outcome{}, err
	}
	command := &agentv1.Command{}
	if err := proto.Unmarshal(commandEnv.Payload, command); err != nil {
		return Outcome{}, badCase("input.command: %v", err)
	}
	domain, err := in.string("trustDomain")
	if err != nil {
		return Outcome{}, err
	}
	at, err := in.time("at")
	if err != nil {
		return Outcome{}, err
	}
	approval, err := envelope(in, "approval")
	if err != nil {
		return refused(err)
	}
	b, err := pki.VerifyBatchApproval(approval, quorum, domain, commandEnv, command, at)
	if err != nil {
		return refused(err)
	}
	return ok(map[string]any{"batchId": b.GetBatchId()})
}

func runRelease(k *Keyring, in input) (Outcome, error) {
	keys, err := k.publics(in, "keys")
	if err != nil {
		return Outcome{}, err
	}
	threshold, err := in.int("threshold")
	if err != nil {
		return Outcome{}, err
	}
	minSequence, err := in.int("minSequence")
	if err != nil {
		return Outcome{}, err
	}
	policy := pki.ReleasePolicy{Keys: keys, Threshold: int(threshold), MinSequence: uint64(minSequence)}
	os, err := in.string("os")
	if err != nil {
		return Outcome{}, err
	}
	arch, err := in.string("arch")
	if err != nil {
		return Outcome{}, err
	}
	artifact, err := in.bytes("artifact")
	if err != nil {
		return Outcome{}, err
	}
	env, err := envelope(in, "envelope")
	if err != nil {
		return refused(err)
	}
	m, err := pki.VerifyRelease(env, policy, os, arch, artifact)
	if err != nil {
		return refused(err)
	}
	return ok(map[string]any{"version": m.Version, "sequence": m.Sequence})
}

func runNodeStatement(k *Keyring, in input) (Outcome, error) {
	key, err := k.public(in, "key")
	if err != nil {
		return Outcome{}, err
	}
	node, err := in.string("nodeId")
	if err != nil {
		return Outcome{}, err
	}
	body, err := in.string("body")
	if err != nil {
		return Outcome{}, err
	}
	env, err := envelope(in, "envelope")
	if err != nil {
		return refused(err)
	}
	s, err := pki.VerifyStatement(env, key, node)
	if err != nil {
		return refused(err)
	}
	if pki.StatementBodyName(s) != body {
		return Outcome{Code: pki.CodeStatementKind}, nil
	}
	return ok(map[string]any{"nodeId": s.GetNodeId(), "bootId": s.GetBootId(), "atMs": s.GetAtMs(), "body": body})
}

// CheckCase runs c and compares its outcome with the case's expectation.
func CheckCase(k *Keyring, c *Case) error {
	out, err := Run(k, c.Kind, c.Input)
	if err != nil {
		return err
	}
	if !c.Positive() {
		if out.Code != pki.Code(c.Error) {
			return fmt.Errorf("expected %s, got %s", c.Error, describeOutcome(out))
		}
		return nil
	}
	if out.Code != "" {
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
