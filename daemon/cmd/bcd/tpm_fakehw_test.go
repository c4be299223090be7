//go:build fakehw

// Tests of a TPM node on the command line (fakehw builds): bcd join
// --attestor tpm with the fakehw TPM (a swtpm on a copy of the committed
// state under the data dir, named by BCD_FAKEHW_TPM_STATE), "already
// joined", bcd node with the session's client key and its statements
// signed in the TPM, a renewal brought forward by BCD_RENEW_AFTER, the
// refusals ek-certificate-chain and node-key-not-csr (BCD_FAKEHW_TPM_CSR_KEY
// =other) in one line with exit 1, and no swtpm left after any command.

package main

import (
	"context"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bcd/internal/fakehw"
	"bcd/internal/identity"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/testgw"
	"bcd/internal/testlog"
	"bcd/internal/tpm"
	"bcd/internal/tpm/attestor"
	"bcd/internal/tpm/tpmtest"
	"google.golang.org/protobuf/proto"
)

// tpmEnv is cliEnv with the fakehw TPM's knobs.
func tpmEnv(t *testing.T, ctx context.Context, out, errOut *testlog.Buffer, knobs map[string]string) env {
	e := cliEnv(ctx, "", out, errOut)
	e.getenv = func(k string) string {
		if v, ok := knobs[k]; ok {
			return v
		}
		return map[string]string{"BCD_FAKEHW_VARIANT": "l40s", fakehw.TPMStateEnv: tpmtest.StatePath(t)}[k]
	}
	return e
}

func tpmGateway(t *testing.T, roots [][]byte) (*testgw.Gateway, string) {
	t.Helper()
	tpmtest.Require(t)
	if roots == nil {
		roots = [][]byte{tpmtest.EKRoot(t)}
	}
	g := testgw.Start(t, testgw.Options{SignedIntent: true, TPM: &testgw.TPMOptions{Roots: roots, NodeKey: attestor.PolicyTPM}})
	return g, g.WriteConfig(t, t.TempDir())
}

// tpmKeyRecord reads node.key, which must be a TPM record, and returns its
// handle header and the key's pin.
func tpmKeyRecord(t *testing.T, dataDir string) (string, string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dataDir, identity.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != identity.TPMKeyType || strings.Contains(string(data), "PRIVATE") {
		t.Fatalf("node.key is not a TPM record:\n%s", data)
	}
	pub, err := tpm.ECDSAPublic(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := pki.NewPublicKey(pub)
	return block.Headers["Handle"], key.Pin()
}

func TestATPMNodeJoinsRunsAndRenews(t *testing.T) {
	g, path := tpmGateway(t, nil)
	dataDir := filepath.Join(filepath.Dir(path), "data")
	knobs := map[string]string{"BCD_RENEW_AFTER": "300ms"}
	var out, errOut testlog.Buffer
	ctx := context.Background()
	if code := run([]string{"join", "--attestor", "tpm", "--config", path}, tpmEnv(t, ctx, &out, &errOut, knobs)); code != 0 {
		t.Fatalf("join: exit %d: %s", code, errOut.String())
	}
	tpmtest.NoSwtpmLeft(t)
	if !strings.Contains(out.String(), "joined as node_1") {
		t.Fatalf("join printed %q", out.String())
	}
	if _, err := os.Stat(filepath.Join(dataDir, fakehw.TPMDirName, fakehw.TPMStateFile)); err != nil {
		t.Fatalf("the TPM state is not in the data dir: %v", err)
	}
	handle, pin := tpmKeyRecord(t, dataDir)
	if handle != "0x81000002" {
		t.Fatalf("node.key names handle %s", handle)
	}
	var again testlog.Buffer
	if code := run([]string{"join", "--attestor", "tpm", "--config", path}, tpmEnv(t, ctx, &again, &errOut, knobs)); code != 0 || !strings.Contains(again.String(), "already joined as node_1") {
		t.Fatalf("second join: exit %d, %q", code, again.String())
	}

	nodeCtx, stop := context.WithCancel(ctx)
	done := make(chan int, 1)
	go func() { done <- run([]string{"node", "--config", path}, tpmEnv(t, nodeCtx, &out, &errOut, knobs)) }()
	var s *testgw.Session
	select {
	case s = <-g.Sessions:
	case <-time.After(10 * time.Second):
		t.Fatalf("no session; stderr %s", errOut.String())
	}
	if s.NodeKey.Pin() != pin {
		t.Fatal("the session's client key is not the TPM node key")
	}
	<-s.Frames // Hello
	s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Welcome{Welcome: &agentv1.Welcome{
		SessionEpoch: 1, ServerTimeMs: time.Now().UnixMilli(), HeartbeatIntervalMs: 1000, LaneCredits: 1}}})
	cmd := &agentv1.Command{Id: "cmd_diag", NodeId: "node_1", Kind: "diag.nvml", NotAfterMs: time.Now().Add(time.Minute).UnixMilli()}
	payload, _ := proto.Marshal(cmd)
	env, err := pki.SignEnvelope(nil, pki.PayloadTypeCommand, payload, g.Keys.CommandRoot)
	if err != nil {
		t.Fatal(err)
	}
	s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Command{Command: &agentv1.CommandDelivery{Command: env.Proto()}}})
	var result *agentv1.Envelope
	for f := range s.Frames {
		if u := f.GetCommandUpdate(); u.GetCommandId() == "cmd_diag" && u.GetState() == agentv1.CommandState_SUCCEEDED {
			result = u.GetResult()
			break
		}
	}
	if _, err := pki.VerifyCommandResult(pki.EnvelopeFromProto(result), s.NodeKey, "node_1"); err != nil {
		t.Fatalf("the result is not signed by the TPM node key: %v", err)
	}

	// bcd has renewed once it logs it (the gateway counts the call earlier).
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(errOut.String(), "msg=renew.renewed") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if g.Renewals() < 1 {
		t.Fatalf("no renewal; stderr %s", errOut.String())
	}
	stop()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("node: exit %d: %s", code, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("node did not stop")
	}
	tpmtest.NoSwtpmLeft(t)
	if handle, renewed := tpmKeyRecord(t, dataDir); renewed == pin || (handle != "0x81000003" && handle != "0x81000002") {
		t.Fatalf("after renewing, node.key names %s (pin changed: %v)", handle, renewed != pin)
	}
	if !strings.Contains(errOut.String(), "msg=renew.renewed") || strings.Contains(errOut.String(), "PRIVATE") {
		t.Fatalf("no renew.renewed line, or key material, in %s", errOut.String())
	}
}

func TestTPMJoinRefusalsSayWhyInOneLine(t *testing.T) {
	other, _ := testgw.NewKeys("another manufacturer")
	for _, tc := range []struct {
		name  string
		roots [][]byte
		knobs map[string]string
		code  string
	}{
		{"another EK root", [][]byte{other.NodeCACert}, nil, "ek-certificate-chain"},
		{"a CSR of another key", nil, map[string]string{"BCD_FAKEHW_TPM_CSR_KEY": "other"}, "node-key-not-csr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, path := tpmGateway(t, tc.roots)
			var out, errOut testlog.Buffer
			code := run([]string{"join", "--attestor", "tpm", "--config", path}, tpmEnv(t, context.Background(), &out, &errOut, tc.knobs))
			lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
			if code != 1 || !strings.HasPrefix(lines[len(lines)-1], "bcd join: join refused: "+tc.code+": ") {
				t.Fatalf("exit %d, stderr %s", code, errOut.String())
			}
			tpmtest.NoSwtpmLeft(t)
		})
	}
}

func TestATPMJoinWithoutTheStateKnobSaysWhichKnob(t *testing.T) {
	_, path := tpmGateway(t, nil)
	var out, errOut testlog.Buffer
	code := run([]string{"join", "--attestor", "tpm", "--config", path}, tpmEnv(t, context.Background(), &out, &errOut, map[string]string{fakehw.TPMStateEnv: ""}))
	if code != 1 || !strings.Contains(errOut.String(), fakehw.TPMStateEnv) {
		t.Fatalf("exit %d, stderr %s", code, errOut.String())
	}
	if code := run([]string{"join", "--attestor", "tpm", "--token-file", "x", "--config", path}, tpmEnv(t, context.Background(), &out, &errOut, nil)); code != 2 {
		t.Fatalf("--attestor tpm with --token-file: exit %d", code)
	}
}
