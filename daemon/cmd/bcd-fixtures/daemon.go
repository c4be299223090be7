// testdata/daemon/daemon.json: what the Go side writes for the Rust side to
// verify (a CSR, a join token sealed by go-jose, node-signed statements), how
// it is built, and the check that it still verifies and says what a fresh
// build would say.

package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
)

// The fixed content of daemon.json.
const (
	daemonComment = "Written by daemon/cmd/bcd-fixtures (`cargo xtask daemon-fixtures`); do not edit. " +
		"Checked by the Rust side (fixtures::daemon). The CSR, the ECDSA signatures and the JWE are random: " +
		"verify them, never compare them. The writer keeps this file while it still verifies and says the same."
	daemonSeed       = "bc-interop-v1"
	daemonAsOfMs     = int64(1767225600000)
	daemonNodeID     = "node_go_0"
	daemonNodeKey    = "node/1"
	daemonCommonName = "bcd"
	daemonToken      = "bc_jt_go_fixture_0000000000000000"
	daemonSecretKey  = "secret-request/0"
	daemonJoinKey    = "join-encryption"
	daemonBootID     = "boot_go_0"
)

// daemonFile is daemon.json; the field order is the file's member order.
type daemonFile struct {
	Comment          string `json:"comment"`
	Seed             string `json:"seed"`
	AsOfMs           int64  `json:"asOfMs"`
	NodeID           string `json:"nodeId"`
	NodeKey          string `json:"nodeKey"`
	CSR              string `json:"csr"`
	Token            string `json:"token"`
	SealedToken      string `json:"sealedToken"`
	DiagResult       string `json:"diagResult"`
	AllocationBound  string `json:"allocationBound"`
	SecretRequest    string `json:"secretRequest"`
	SecretRequestKey string `json:"secretRequestKey"`
}

// daemonPath is where daemon.json lives under a testdata directory.
func daemonPath(testdata string) string { return filepath.Join(testdata, "daemon", "daemon.json") }

// statements returns the deterministic statements of daemon.json, by member.
func statements() (map[string]*agentv1.NodeStatement, error) {
	ephemeral, err := pki.NewPublicKey(&pki.DeriveP256(daemonSeed, daemonSecretKey).PublicKey)
	if err != nil {
		return nil, err
	}
	statement := func(body func(*agentv1.NodeStatement)) *agentv1.NodeStatement {
		s := &agentv1.NodeStatement{NodeId: daemonNodeID, BootId: daemonBootID, AtMs: daemonAsOfMs}
		body(s)
		return s
	}
	return map[string]*agentv1.NodeStatement{
		"diagResult": statement(func(s *agentv1.NodeStatement) {
			s.Body = &agentv1.NodeStatement_CommandResult{CommandResult: &agentv1.CommandResult{
				CommandId: "cmd_go_0",
				Kind:      "diag.nvml",
				State:     agentv1.CommandState_SUCCEEDED,
				Output:    []byte(`{"gpus":8,"healthy":8}`),
			}}
		}),
		"allocationBound": statement(func(s *agentv1.NodeStatement) {
			s.Body = &agentv1.NodeStatement_AllocationBound{AllocationBound: &agentv1.AllocationBound{
				AllocationId: "alloc_go_0",
				GpuIndexes:   []uint32{0, 1},
				CdiDevices:   []string{"nvidia.com/gpu=0", "nvidia.com/gpu=1"},
				Generation:   1,
			}}
		}),
		"secretRequest": statement(func(s *agentv1.NodeStatement) {
			s.Body = &agentv1.NodeStatement_SecretRequest{SecretRequest: &agentv1.SecretRequest{
				RequestId:        "sreq_go_0",
				SecretRef:        "volume/vol_go_0/key",
				EphemeralSpkiDer: ephemeral.SPKI(),
			}}
		}),
	}, nil
}

// envelopeField returns the member of f that holds the envelope of name.
func (f *daemonFile) envelopeField(name string) *string {
	switch name {
	case "diagResult":
		return &f.DiagResult
	case "allocationBound":
		return &f.AllocationBound
	case "secretRequest":
		return &f.SecretRequest
	}
	panic("bcd-fixtures: no envelope member " + name)
}

// sealedPayload is the plaintext the sealed token must hold for csrPin.
func sealedPayload(csrPin string) []byte {
	p := &pki.SealedTokenPayload{Token: daemonToken, CSR: csrPin, IAT: daemonAsOfMs / 1000}
	return p.JSON()
}

// buildDaemonFile makes a fresh daemon.json with new random signatures.
func buildDaemonFile() (*daemonFile, error) {
	nodeKey := pki.DeriveP256(daemonSeed, daemonNodeKey)
	csrDER, err := pki.CreateCSR(rand.Reader, nodeKey, daemonCommonName)
	if err != nil {
		return nil, err
	}
	csr, err := pki.ParseCSR(csrDER)
	if err != nil {
		return nil, err
	}
	joinKey := pki.DeriveP256(daemonSeed, daemonJoinKey)
	sealed, err := pki.SealJoinToken(&joinKey.PublicKey, daemonToken, csr.Pin, daemonAsOfMs/1000)
	if err != nil {
		return nil, err
	}
	f := &daemonFile{
		Comment:          daemonComment,
		Seed:             daemonSeed,
		AsOfMs:           daemonAsOfMs,
		NodeID:           daemonNodeID,
		NodeKey:          daemonNodeKey,
		CSR:              base64.StdEncoding.EncodeToString(csrDER),
		Token:            daemonToken,
		SealedToken:      sealed,
		SecretRequestKey: daemonSecretKey,
	}
	stmts, err := statements()
	if err != nil {
		return nil, err
	}
	for name, s := range stmts {
		env, err := pki.SignStatement(rand.Reader, nodeKey, s)
		if err != nil {
			return nil, err
		}
		*f.envelopeField(name) = string(env.JSON())
	}
	return f, nil
}

// render is the file's bytes: pretty JSON (two-space indent), no HTML
// escaping, a trailing newline.
func (f *daemonFile) render() []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(f); err != nil {
		panic("bcd-fixtures: a struct of strings always encodes: " + err.Error())
	}
	return buf.Bytes()
}

// checkDaemonFile verifies data as daemon.json and checks that it says what
// a fresh build would: the same members and layout, the fixed values, a CSR
// for the node key with subject CN=bcd, a sealed token opening to the same
// plaintext, and statements with the same payloads, each signed once by the
// node key.
func checkDaemonFile(data []byte) error {
	f := &daemonFile{}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(f); err != nil {
		return fmt.Errorf("not the daemon.json format: %w", err)
	}
	if !bytes.Equal(f.render(), data) {
		return errors.New("members, their order or the layout differ from what the writer writes")
	}
	want := daemonFile{Comment: daemonComment, Seed: daemonSeed, AsOfMs: daemonAsOfMs, NodeID: daemonNodeID,
		NodeKey: daemonNodeKey, Token: daemonToken, SecretRequestKey: daemonSecretKey}
	got := daemonFile{Comment: f.Comment, Seed: f.Seed, AsOfMs: f.AsOfMs, NodeID: f.NodeID,
		NodeKey: f.NodeKey, Token: f.Token, SecretRequestKey: f.SecretRequestKey}
	if got != want {
		return errors.New("a fixed member (comment, seed, asOfMs, nodeId, nodeKey, token, secretRequestKey) differs")
	}

	nodeKey, err := pki.NewPublicKey(&pki.DeriveP256(daemonSeed, daemonNodeKey).PublicKey)
	if err != nil {
		return err
	}
	csrDER, err := base64.StdEncoding.Strict().DecodeString(f.CSR)
	if err != nil {
		return fmt.Errorf("csr: not base64: %w", err)
	}
	csr, err := pki.ParseCSR(csrDER)
	if err != nil {
		return fmt.Errorf("csr: %w", err)
	}
	if csr.Pin != nodeKey.Pin() {
		return errors.New("csr: not for the node key")
	}
	if subject := csr.Subject.String(); subject != "CN="+daemonCommonName {
		return fmt.Errorf("csr: subject %q, expected CN=%s", subject, daemonCommonName)
	}

	joinKey := pki.DeriveP256(daemonSeed, daemonJoinKey)
	plain, err := pki.OpenJWE(joinKey, f.SealedToken)
	if err != nil {
		return fmt.Errorf("sealedToken: %w", err)
	}
	if !bytes.Equal(plain, sealedPayload(csr.Pin)) {
		// Never print the plaintext: it holds the (test) join token.
		return errors.New("sealedToken: opens to another payload")
	}

	stmts, err := statements()
	if err != nil {
		return err
	}
	for name, s := range stmts {
		if err := checkStatement(*f.envelopeField(name), s, nodeKey); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// checkStatement verifies one node-signed statement and compares its payload.
func checkStatement(text string, want *agentv1.NodeStatement, nodeKey *pki.PublicKey) error {
	env, err := pki.ParseEnvelopeJSON([]byte(text))
	if err != nil {
		return err
	}
	if len(env.Signatures) != 1 {
		return fmt.Errorf("%d signatures, expected one by the node key", len(env.Signatures))
	}
	if _, err := pki.VerifyStatement(env, nodeKey, daemonNodeID); err != nil {
		return err
	}
	payload, err := proto.MarshalOptions{Deterministic: true}.Marshal(want)
	if err != nil {
		return err
	}
	if !bytes.Equal(env.Payload, payload) {
		return errors.New("the statement differs from what the writer writes")
	}
	return nil
}

// writeDaemonFile writes daemon.json under testdata unless the file there
// still verifies and says the same, and reports whether it wrote.
func writeDaemonFile(testdata string) (bool, error) {
	path := daemonPath(testdata)
	if data, err := os.ReadFile(path); err == nil && checkDaemonFile(data) == nil {
		return false, nil
	}
	f, err := buildDaemonFile()
	if err != nil {
		return false, err
	}
	data := f.render()
	if err := checkDaemonFile(data); err != nil {
		return false, fmt.Errorf("a fresh daemon.json does not verify: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	return true, os.WriteFile(path, data, 0o644)
}
