// A test of one agent whose configuration lists two test gateways that
// share their keys: it connects to the first, moves to the second when the
// first is killed, runs a command the second delivers, and its status
// names the gateway it is connected to.

package agent

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"bcd/internal/config"
	"bcd/internal/join"
	"bcd/internal/proto/agentv1"
	"bcd/internal/testgw"
	"bcd/internal/testlog"
)

func TestAnAgentFailsOverToTheNextGatewayOfItsList(t *testing.T) {
	a := testgw.Start(t, testgw.Options{SignedIntent: true})
	b := testgw.Start(t, testgw.Options{SignedIntent: true, Keys: a.Keys})
	a.AddToken(token)
	path := a.WriteConfig(t, t.TempDir())
	if err := config.SetEncoded(path, map[string]string{"gateway_urls": config.QuoteArray([]string{a.URL, b.URL})}, nil); err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	if _, err := join.Join(context.Background(), join.Options{ConfigPath: path, Token: token, Log: slog.New(slog.NewTextHandler(logs, nil))}); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, a, path, logs)
	s := next(t, a)
	frameWhere(t, s, func(f *agentv1.NodeFrame) bool { return f.GetHello() != nil })
	s.Send(welcome())
	frameWhere(t, s, func(f *agentv1.NodeFrame) bool { return f.GetStatusReport() != nil })
	awaitStatus(t, n, "connected", a.URL)

	a.Stop()
	s = next(t, b)
	frameWhere(t, s, func(f *agentv1.NodeFrame) bool { return f.GetHello() != nil })
	s.Send(welcome())
	frameWhere(t, s, func(f *agentv1.NodeFrame) bool { return f.GetStatusReport() != nil })
	awaitStatus(t, n, "connected", b.URL)
	s.Send(commandFrame(t, a.Keys.CommandRoot, &agentv1.Command{Id: "cmd_diag", NodeId: n.cfg.NodeID, Kind: "diag.nvml", NotAfterMs: time.Now().Add(time.Minute).UnixMilli()}))
	frameWhere(t, s, update("cmd_diag", agentv1.CommandState_SUCCEEDED))
	if text := logs.String(); !strings.Contains(text, "msg=session.failover from="+a.URL+" to="+b.URL+" reason=dropped") {
		t.Fatalf("no session.failover line in\n%s", text)
	}
}

// awaitStatus polls the agent's status until its session is in state on
// gateway, for at most 5 s.
func awaitStatus(t *testing.T, n *node, state, gateway string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for st := n.agent.Status().Session; st.State != state || st.Gateway != gateway; st = n.agent.Status().Session {
		if time.Now().After(deadline) {
			t.Fatalf("session %+v, want %s on %s", st, state, gateway)
		}
		time.Sleep(time.Millisecond)
	}
}
