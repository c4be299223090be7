// End-to-end tests of the command line against the in-process gateway:
// join with the token on standard input or in a file (removed after the
// join), "already joined", node with status --json over the socket, a
// refused join's one-line reason, and exit 0 when the context ends.

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bcd/internal/proto/agentv1"
	"bcd/internal/testgw"
	"bcd/internal/testlog"
)

const cliToken = "bc_jt_cli_test_secret_7"

func cliEnv(ctx context.Context, stdin string, out, errOut *testlog.Buffer) env {
	return env{ctx: ctx, stdin: strings.NewReader(stdin), stdout: out, stderr: errOut,
		getenv: func(k string) string {
			if k == "BCD_FAKEHW_VARIANT" {
				return "l40s"
			}
			return ""
		}}
}

func TestJoinNodeAndStatus(t *testing.T) {
	g := testgw.Start(t, testgw.Options{SignedIntent: true})
	g.AddToken(cliToken)
	dir := t.TempDir()
	path := g.WriteConfig(t, dir)
	var out, errOut testlog.Buffer
	ctx := context.Background()
	if code := run([]string{"join", "--config", path}, cliEnv(ctx, cliToken+"\n", &out, &errOut)); code != 0 {
		t.Fatalf("join: exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "joined as node_1") {
		t.Fatalf("join printed %q", out.String())
	}
	if code := run([]string{"join", "--config", path}, cliEnv(ctx, "", &out, &errOut)); code != 0 || !strings.Contains(out.String(), "already joined") {
		t.Fatalf("second join: exit %d, %q", code, out.String())
	}

	nodeCtx, stop := context.WithCancel(ctx)
	done := make(chan int, 1)
	go func() { done <- run([]string{"node", "--config", path}, cliEnv(nodeCtx, "", &out, &errOut)) }()
	var s *testgw.Session
	select {
	case s = <-g.Sessions:
	case <-time.After(5 * time.Second):
		t.Fatalf("no session; stderr %s", errOut.String())
	}
	<-s.Frames // Hello
	s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Welcome{Welcome: &agentv1.Welcome{
		SessionEpoch: 5, ServerTimeMs: time.Now().UnixMilli(), HeartbeatIntervalMs: 1000, LaneCredits: 1}}})
	for f := range s.Frames {
		if f.GetStatusReport() != nil {
			break
		}
	}
	var statusOut, statusErr testlog.Buffer
	if code := run([]string{"status", "--json", "--config", path}, cliEnv(ctx, "", &statusOut, &statusErr)); code != 0 {
		t.Fatalf("status: exit %d: %s", code, statusErr.String())
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(statusOut.String()), &st); err != nil {
		t.Fatalf("status printed %q", statusOut.String())
	}
	session := st["session"].(map[string]any)
	if st["nodeId"] != "node_1" || session["state"] != "connected" || session["epoch"] != 5.0 || session["gateway"] != g.URL {
		t.Fatalf("status %v", st)
	}
	stop()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("node: exit %d on shutdown: %s", code, errOut.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("node did not stop")
	}
	if strings.Contains(out.String()+errOut.String()+statusOut.String(), cliToken) {
		t.Fatal("the token was printed")
	}
	if !strings.Contains(errOut.String(), "msg=session.connected epoch=5") {
		t.Fatalf("no greppable session.connected line in %s", errOut.String())
	}
}

func TestJoinWithATokenFileRemovesIt(t *testing.T) {
	g := testgw.Start(t, testgw.Options{})
	g.AddToken(cliToken)
	dir := t.TempDir()
	path := g.WriteConfig(t, dir)
	tokenFile := filepath.Join(dir, "token")
	writeFile(t, tokenFile, cliToken)
	var out, errOut testlog.Buffer
	if code := run([]string{"join", "--config", path, "--token-file", tokenFile}, cliEnv(context.Background(), "", &out, &errOut)); code != 0 {
		t.Fatalf("join: exit %d: %s", code, errOut.String())
	}
	if _, err := os.Stat(tokenFile); !os.IsNotExist(err) {
		t.Fatal("the token file is still there")
	}
}

func TestARefusedJoinSaysWhyInOneLine(t *testing.T) {
	g := testgw.Start(t, testgw.Options{})
	dir := t.TempDir()
	path := g.WriteConfig(t, dir)
	var out, errOut testlog.Buffer
	code := run([]string{"join", "--config", path}, cliEnv(context.Background(), cliToken, &out, &errOut))
	if code != 1 || !strings.Contains(errOut.String(), "token-unknown: ") || strings.Contains(errOut.String(), cliToken) {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	if lines := strings.Split(strings.TrimSpace(errOut.String()), "\n"); !strings.HasPrefix(lines[len(lines)-1], "bcd join: join refused: token-unknown") {
		t.Fatalf("last line %q", lines[len(lines)-1])
	}
}

func TestATokenLargerThan64KiBOnStandardInputIsRefusedNotCut(t *testing.T) {
	g := testgw.Start(t, testgw.Options{})
	g.AddToken(cliToken)
	dir := t.TempDir()
	path := g.WriteConfig(t, dir)
	// The real token, then 3 MB more: cut at 64 KiB it would be another token.
	huge := cliToken + strings.Repeat("x", 3<<20)
	for _, args := range [][]string{{"join", "--config", path}, {"join", "--config", path, "--token-file", filepath.Join(dir, "token")}} {
		writeFile(t, filepath.Join(dir, "token"), huge)
		var out, errOut testlog.Buffer
		code := run(args, cliEnv(context.Background(), huge, &out, &errOut))
		if code != 1 || !strings.Contains(errOut.String(), "larger than 65536 bytes") || strings.Contains(errOut.String(), cliToken) {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errOut.String())
		}
	}
	if data, _ := os.ReadFile(path); strings.Contains(string(data), "node_id") {
		t.Fatal("a refused token joined the node")
	}
	if _, err := os.Stat(filepath.Join(dir, "token")); err != nil {
		t.Fatal("the token file of a refused join was removed")
	}
}
