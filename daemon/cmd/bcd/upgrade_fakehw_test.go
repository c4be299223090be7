//go:build fakehw

// Self-update of real processes: bcd 0.1.0 built and installed in slot a
// behind the entrypoint, run as `<slots>/bcd node`, takes a signed
// daemon.upgrade to a 0.9.0 build, execs it in the same process, and 0.9.0
// is confirmed by its first Welcome (SUCCEEDED, slot bcd-b, upgrade.json
// gone). Then a never-connecting 0.9.1 (-X main.neverConnect=true) is rolled
// back after BCD_UPDATE_CONFIRM_TIMEOUT, and 0.9.0, exec'd again, reports it
// FAILED "rollback: 0.9.1 never connected".

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/testgw"
	"bcd/internal/testlog"
	"bcd/internal/update"
	"bcd/internal/update/updatetest"
	"google.golang.org/protobuf/proto"
)

// buildBcd builds the fakehw bcd with ldflags into dir.
func buildBcd(t *testing.T, dir, name, ldflags string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-tags", "nonvml,fakehw", "-ldflags", ldflags, "-o", out, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", name, err, b)
	}
	return out
}

func nextSession(t *testing.T, g *testgw.Gateway, logs *testlog.Buffer) *testgw.Session {
	t.Helper()
	select {
	case s := <-g.Sessions:
		return s
	case <-time.After(30 * time.Second):
		t.Fatalf("no session; bcd's log:\n%s", logs.String())
	}
	return nil
}

func frame(t *testing.T, s *testgw.Session, logs *testlog.Buffer, match func(*agentv1.NodeFrame) bool) *agentv1.NodeFrame {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case f, ok := <-s.Frames:
			if !ok {
				t.Fatalf("the stream ended; bcd's log:\n%s", logs.String())
			}
			if f.GetSeq() > 0 {
				s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_EventAck{EventAck: &agentv1.EventAck{UpToSeq: f.GetSeq()}}})
			}
			if match(f) {
				return f
			}
		case <-timeout:
			t.Fatalf("no such frame; bcd's log:\n%s", logs.String())
		}
	}
}

func welcomeFrame() *agentv1.GatewayFrame {
	return &agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Welcome{Welcome: &agentv1.Welcome{
		SessionEpoch: 1, ServerTimeMs: time.Now().UnixMilli(), HeartbeatIntervalMs: 1000, LaneCredits: 2}}}
}

func TestSelfUpdateExecsTheNewBinaryAndRollsBackOneThatNeverConnects(t *testing.T) {
	if testing.Short() {
		t.Skip("builds three bcd binaries")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go on PATH to build bcd")
	}
	bins := t.TempDir()
	v010 := buildBcd(t, bins, "bcd-0.1.0", "-X main.version=0.1.0")
	v090 := buildBcd(t, bins, "bcd-0.9.0", "-X main.version=0.9.0")
	v091 := buildBcd(t, bins, "bcd-0.9.1", "-X main.version=0.9.1 -X main.neverConnect=true")
	artifacts := map[string][]byte{}
	for version, path := range map[string]string{"0.9.0": v090, "0.9.1": v091} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		artifacts["/releases/"+version+"/bcd-linux-amd64"] = data
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, ok := artifacts[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(data)
	}))
	defer srv.Close()

	g := testgw.Start(t, testgw.Options{SignedIntent: true})
	g.AddToken(cliToken)
	dir := t.TempDir()
	path := g.WriteConfig(t, dir)
	var out, errOut testlog.Buffer
	if code := run([]string{"join", "--config", path}, cliEnv(context.Background(), cliToken+"\n", &out, &errOut)); code != 0 {
		t.Fatalf("join: %s", errOut.String())
	}
	// The [update] table pinning testdata/release's two keys (threshold 2, lowest sequence 5).
	rel := updatetest.Load(t)
	table := (&update.Config{Threshold: 2, MinSequence: 5, ReleaseKeys: rel.SPKIs(), ReleaseKeyPins: rel.Pins()}).String()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("\n" + table)
	f.Close()
	slots := filepath.Join(dir, "slots")
	if err := update.Install(slots, v010); err != nil {
		t.Fatal(err)
	}
	entrypoint := filepath.Join(slots, update.Entrypoint)

	logs := &testlog.Buffer{}
	node := exec.Command(entrypoint, "node", "--config", path)
	node.Env = append(os.Environ(), "BCD_UPDATE_CONFIRM_TIMEOUT=1s", "BCD_FAKEHW_BACKOFF_CAP=100ms")
	node.Stdout, node.Stderr = logs, logs
	node.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- node.Wait() }()
	defer func() {
		node.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			node.Process.Kill()
		}
	}()

	upgrade := func(s *testgw.Session, id, version string, sequence uint64) {
		t.Helper()
		data := artifacts["/releases/"+version+"/bcd-linux-amd64"]
		sum := sha256.Sum256(data)
		env := rel.Sign(t, pki.Manifest{Version: version, Sequence: sequence, Artifacts: []pki.Artifact{{OS: "linux", Arch: "amd64",
			SHA256: hex.EncodeToString(sum[:]), Size: uint64(len(data)), URL: srv.URL + "/releases/" + version + "/bcd-linux-amd64"}}})
		params, _ := json.Marshal(map[string]json.RawMessage{"manifest": env.JSON()})
		payload, _ := proto.Marshal(&agentv1.Command{Id: id, NodeId: "node_1", Kind: update.Kind, Params: params, RetrySafe: true,
			NotAfterMs: time.Now().Add(time.Minute).UnixMilli()})
		cmd, err := pki.SignEnvelope(nil, pki.PayloadTypeCommand, payload, g.Keys.CommandRoot)
		if err != nil {
			t.Fatal(err)
		}
		s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Command{Command: &agentv1.CommandDelivery{Command: cmd.Proto()}}})
	}
	hello := func(s *testgw.Session) *agentv1.Hello {
		return frame(t, s, logs, func(f *agentv1.NodeFrame) bool { return f.GetHello() != nil }).GetHello()
	}
	result := func(s *testgw.Session, id string, state agentv1.CommandState) *agentv1.CommandUpdate {
		return frame(t, s, logs, func(f *agentv1.NodeFrame) bool {
			u := f.GetCommandUpdate()
			return u.GetCommandId() == id && u.GetState() == state
		}).GetCommandUpdate()
	}
	exe := func() string {
		target, _ := os.Readlink("/proc/" + strconv.Itoa(node.Process.Pid) + "/exe")
		return filepath.Base(target)
	}

	// 0.1.0 takes the upgrade to 0.9.0 and execs it in the same process.
	s := nextSession(t, g, logs)
	if v := hello(s).GetDaemonVersion(); v != "0.1.0" {
		t.Fatalf("hello from %s", v)
	}
	s.Send(welcomeFrame())
	upgrade(s, "cmd_up_1", "0.9.0", 7)
	s = nextSession(t, g, logs)
	if v := hello(s).GetDaemonVersion(); v != "0.9.0" {
		t.Fatalf("hello from %s after the upgrade", v)
	}
	if exe() != update.SlotB {
		t.Fatalf("process %d runs %s, not bcd-b", node.Process.Pid, exe())
	}
	s.Send(welcomeFrame())
	u := result(s, "cmd_up_1", agentv1.CommandState_SUCCEEDED)
	stmt, err := pki.VerifyStatement(pki.EnvelopeFromProto(u.GetResult()), s.NodeKey, "node_1")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(stmt.GetCommandResult().GetOutput()); got != `{"version":"0.9.0","sequence":7,"previous":"0.1.0","slot":"bcd-b"}` {
		t.Fatalf("output %s", got)
	}
	if target, _ := os.Readlink(entrypoint); target != update.SlotB {
		t.Fatalf("current is %s", target)
	}
	if _, err := os.Stat(filepath.Join(slots, update.UpgradeFile)); !os.IsNotExist(err) {
		t.Fatalf("upgrade.json remains: %v", err)
	}

	// 0.9.1 never connects: rolled back to 0.9.0 after a second, which reports it.
	upgrade(s, "cmd_up_2", "0.9.1", 8)
	s = nextSession(t, g, logs)
	if v := hello(s).GetDaemonVersion(); v != "0.9.0" {
		t.Fatalf("hello from %s after the rollback", v)
	}
	s.Send(welcomeFrame())
	if u := result(s, "cmd_up_2", agentv1.CommandState_FAILED); u.GetReason() != "rollback: 0.9.1 never connected" {
		t.Fatalf("reason %q", u.GetReason())
	}
	if target, _ := os.Readlink(entrypoint); target != update.SlotB || exe() != update.SlotB {
		t.Fatalf("after the rollback current is %s, the process runs %s", target, exe())
	}
	for _, want := range []string{"fakehw.never_connects", "update.never_connected", "update.settled"} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("bcd's log lacks %s:\n%s", want, logs.String())
		}
	}
	select {
	case err := <-exited:
		t.Fatalf("bcd exited (%v) instead of exec'ing", err)
	default:
	}
}
