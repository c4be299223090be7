// Tests of what a reconnection costs bcd: its TLS session resumed (no
// certificate or signature), and one journal commit for the Welcome (the
// mark, the anchor, the ack and the StatusReport together).

package session

import (
	"context"
	"testing"
	"time"

	"bcd/internal/proto/agentv1"
)

func TestAReconnectionResumesItsTLSSessionAndCommitsTheJournalOnce(t *testing.T) {
	r := setup(t, nil)
	r.handler.onWelcome = func() {
		if _, err := r.journal.Append(report(7)); err != nil {
			t.Error(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.done = make(chan error, 1)
	go func() { r.done <- r.session.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})

	// The first connection: a full handshake. Its Welcome (the journal's
	// first server time, so its anchor too) costs one commit, with the
	// StatusReport.
	s := r.next(t)
	if s.Resumed {
		t.Fatal("the first connection resumed a session")
	}
	recv(t, s)
	s.Send(welcome(time.Now(), 1000, 0))
	sent := recvWhere(t, s, isEvent)
	if got := r.journal.Commits(); got != 1 {
		t.Fatalf("the first Welcome cost %d commits", got)
	}
	if anchor, _ := r.journal.Anchor(); anchor <= 0 {
		t.Fatal("no anchor")
	}
	// The gateway's ack is taken, not written.
	s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_EventAck{EventAck: &agentv1.EventAck{UpToSeq: sent.GetSeq()}}})
	deadline := time.Now().Add(wait)
	for r.journal.LastAcked() != sent.GetSeq() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := r.journal.Commits(); got != 1 || r.journal.LastAcked() != sent.GetSeq() {
		t.Fatalf("after the ack: %d commits, acked %d", got, r.journal.LastAcked())
	}

	// A Drain: the reconnection resumes the TLS session, and its Welcome
	// (a mark that moves, the ack taken before, the StatusReport) costs
	// one commit.
	s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Drain{Drain: &agentv1.Drain{Reason: "restart"}}})
	ended(t, s)
	s = r.next(t)
	if !s.Resumed {
		t.Fatal("the reconnection did not resume its TLS session")
	}
	recv(t, s)
	s.Send(welcome(time.Now().Add(time.Second), 1000, sent.GetSeq()))
	recvWhere(t, s, isEvent)
	if got := r.journal.Commits(); got != 2 {
		t.Fatalf("the reconnection's Welcome cost %d commits", got-1)
	}
}
