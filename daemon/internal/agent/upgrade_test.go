// Tests of self-update through the agent against the in-process gateway:
// a signed daemon.upgrade swaps to slot b and execs the entrypoint, the new
// version is confirmed by its first Welcome (SUCCEEDED with its output,
// upgrade.json gone), and a new version that never connects is rolled
// back at its deadline, after which the previous version reports the
// command FAILED and records the release as failed.

package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"bcd/internal/join"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/testgw"
	"bcd/internal/testlog"
	selfupdate "bcd/internal/update"
	"bcd/internal/update/updatetest"
)

// upgradeRig is a joined node with slots and a release server.
type upgradeRig struct {
	g        *testgw.Gateway
	path     string
	slots    *selfupdate.Slots
	policy   pki.ReleasePolicy
	params   []byte
	logs     *testlog.Buffer
	execs    chan string
	artifact []byte
}

func newUpgradeRig(t *testing.T) *upgradeRig {
	t.Helper()
	r := &upgradeRig{g: testgw.Start(t, testgw.Options{SignedIntent: true}), logs: &testlog.Buffer{}, execs: make(chan string, 1),
		artifact: []byte("the bytes of bcd 0.9.0")}
	r.g.AddToken(token)
	dir := t.TempDir()
	r.path = r.g.WriteConfig(t, dir)
	if _, err := join.Join(context.Background(), join.Options{ConfigPath: r.path, Token: token, Log: slog.New(slog.NewTextHandler(r.logs, nil))}); err != nil {
		t.Fatal(err)
	}
	installedBin := filepath.Join(dir, "bcd-installed")
	if err := os.WriteFile(installedBin, []byte("the bytes of bcd 0.1.0"), 0o755); err != nil {
		t.Fatal(err)
	}
	slotsDir := filepath.Join(dir, "slots")
	if err := selfupdate.Install(slotsDir, installedBin); err != nil {
		t.Fatal(err)
	}
	// The two release keys of testdata/release, threshold 2, lowest sequence 5.
	rel := updatetest.Load(t)
	policy, err := (&selfupdate.Config{Threshold: 2, MinSequence: 5, ReleaseKeys: rel.SPKIs()}).Policy()
	if err != nil {
		t.Fatal(err)
	}
	r.policy = policy
	r.slots = &selfupdate.Slots{Dir: slotsDir, Staged: filepath.Join(dir, "staged"), StagedUID: uint32(os.Geteuid()), Policy: r.policy}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(r.artifact) }))
	t.Cleanup(srv.Close)
	sum := sha256.Sum256(r.artifact)
	env := rel.Sign(t, pki.Manifest{Version: "0.9.0", Sequence: 7, Artifacts: []pki.Artifact{{
		OS: "linux", Arch: "amd64", SHA256: hex.EncodeToString(sum[:]), Size: uint64(len(r.artifact)), URL: srv.URL + "/releases/0.9.0/bcd-linux-amd64"}}})
	r.params, _ = json.Marshal(map[string]json.RawMessage{"manifest": env.JSON()})
	return r
}

// start runs an agent of version with the rig's slots.
func (r *upgradeRig) start(t *testing.T, version string, confirmTimeout time.Duration, neverConnect bool) *node {
	t.Helper()
	u := &selfupdate.Updater{Store: r.slots, Policy: r.policy, Staged: r.slots.Staged, Version: version, OS: "linux", Arch: "amd64", ConfirmTimeout: confirmTimeout}
	n := runNode(t, r.path, Options{Version: version, NoStatusSocket: true, Log: slog.New(slog.NewTextHandler(r.logs, nil)),
		Updater: u, NeverConnect: neverConnect, BackoffCap: 50 * time.Millisecond,
		Exec: func(path string) error { r.execs <- path; return nil }})
	t.Cleanup(func() { n.cancel(); <-n.done })
	return n
}

func (r *upgradeRig) upgradeFrame(t *testing.T, nodeID string) *agentv1.GatewayFrame {
	return commandFrame(t, r.g.Keys.CommandRoot, &agentv1.Command{Id: "cmd_upgrade", NodeId: nodeID, Kind: selfupdate.Kind,
		Params: r.params, RetrySafe: true, NotAfterMs: time.Now().Add(time.Minute).UnixMilli()})
}

// awaitExec waits for the agent to exec and end.
func (r *upgradeRig) awaitExec(t *testing.T, n *node) string {
	t.Helper()
	select {
	case path := <-r.execs:
		select {
		case code := <-n.done:
			n.done <- code
			if code != ExitOK {
				t.Fatalf("exit %d after the exec", code)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the agent did not end after its exec")
		}
		return path
	case <-time.After(10 * time.Second):
		t.Fatal("no exec")
	}
	return ""
}

func (r *upgradeRig) current(t *testing.T) string {
	t.Helper()
	c, err := r.slots.Current()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestUpgradeExecsAndTheWelcomeConfirms(t *testing.T) {
	r := newUpgradeRig(t)
	old := r.start(t, "0.1.0", time.Minute, false)
	s := next(t, r.g)
	s.Send(welcome())
	s.Send(r.upgradeFrame(t, old.cfg.NodeID))
	frameWhere(t, s, update("cmd_upgrade", agentv1.CommandState_RUNNING))
	if path := r.awaitExec(t, old); path != r.slots.Entrypoint() {
		t.Fatalf("exec %s, want the entrypoint %s", path, r.slots.Entrypoint())
	}
	if r.current(t) != selfupdate.SlotB {
		t.Fatal("current is not bcd-b after the swap")
	}
	if data, _ := os.ReadFile(r.slots.Entrypoint()); string(data) != string(r.artifact) {
		t.Fatalf("the entrypoint runs %q", data)
	}

	// The new binary: its Hello names 0.9.0; its first Welcome confirms.
	newer := r.start(t, "0.9.0", time.Minute, false)
	s = next(t, r.g)
	if hello := frameWhere(t, s, func(f *agentv1.NodeFrame) bool { return f.GetHello() != nil }).GetHello(); hello.GetDaemonVersion() != "0.9.0" {
		t.Fatalf("hello %v", hello)
	}
	s.Send(welcome())
	u := frameWhere(t, s, update("cmd_upgrade", agentv1.CommandState_SUCCEEDED)).GetCommandUpdate()
	stmt, err := pki.VerifyStatement(pki.EnvelopeFromProto(u.GetResult()), s.NodeKey, newer.cfg.NodeID)
	if err != nil {
		t.Fatal(err)
	}
	if out := string(stmt.GetCommandResult().GetOutput()); out != `{"version":"0.9.0","sequence":7,"previous":"0.1.0","slot":"bcd-b"}` {
		t.Fatalf("output %s", out)
	}
	if p, _ := r.slots.Pending(); p != nil {
		t.Fatalf("upgrade.json remains: %+v", p)
	}
	// A redelivery gets the stored result.
	s.Send(r.upgradeFrame(t, newer.cfg.NodeID))
	frameWhere(t, s, update("cmd_upgrade", agentv1.CommandState_SUCCEEDED))
}

func TestANewVersionThatNeverConnectsIsRolledBack(t *testing.T) {
	r := newUpgradeRig(t)
	old := r.start(t, "0.1.0", 300*time.Millisecond, false)
	s := next(t, r.g)
	s.Send(welcome())
	s.Send(r.upgradeFrame(t, old.cfg.NodeID))
	r.awaitExec(t, old)

	started := time.Now()
	never := r.start(t, "0.9.0", time.Minute, true)
	if path := r.awaitExec(t, never); path != r.slots.Entrypoint() {
		t.Fatalf("exec %s", path)
	}
	if took := time.Since(started); took > 5*time.Second {
		t.Fatalf("the rollback took %s with a 300 ms deadline", took)
	}
	if r.current(t) != selfupdate.SlotA {
		t.Fatal("current is not bcd-a after the rollback")
	}

	// The previous version starts again and reports the failure.
	again := r.start(t, "0.1.0", time.Minute, false)
	s = next(t, r.g)
	s.Send(welcome())
	u := frameWhere(t, s, update("cmd_upgrade", agentv1.CommandState_FAILED)).GetCommandUpdate()
	if u.GetReason() != "rollback: 0.9.0 never connected" {
		t.Fatalf("reason %q", u.GetReason())
	}
	if _, err := pki.VerifyStatement(pki.EnvelopeFromProto(u.GetResult()), s.NodeKey, again.cfg.NodeID); err != nil {
		t.Fatal(err)
	}
	failed, _ := r.slots.Failed()
	if len(failed) != 1 || failed[0].Version != "0.9.0" {
		t.Fatalf("failed.json %+v", failed)
	}
	// Rolling the same release out again is refused.
	cmd := &agentv1.Command{Id: "cmd_upgrade_2", NodeId: again.cfg.NodeID, Kind: selfupdate.Kind, Params: r.params, RetrySafe: true,
		NotAfterMs: time.Now().Add(time.Minute).UnixMilli()}
	s.Send(commandFrame(t, r.g.Keys.CommandRoot, cmd))
	u = frameWhere(t, s, update("cmd_upgrade_2", agentv1.CommandState_FAILED)).GetCommandUpdate()
	if got := selfupdate.Code(u.GetReason()[:len(selfupdate.CodeReleaseFailed)]); got != selfupdate.CodeReleaseFailed {
		t.Fatalf("reason %q", u.GetReason())
	}
}

func TestWithoutUpdateDaemonUpgradeIsUnsupported(t *testing.T) {
	r := newUpgradeRig(t)
	n := startNode(t, r.g, r.path, r.logs)
	s := next(t, r.g)
	s.Send(welcome())
	s.Send(r.upgradeFrame(t, n.cfg.NodeID))
	frameWhere(t, s, update("cmd_upgrade", agentv1.CommandState_UNSUPPORTED))
}
