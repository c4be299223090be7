// Native fuzz target of the session frames: a GatewayFrame as the gateway
// sends it, decoded as gRPC does and handled by Session.frame. Properties:
// the decoded frame re-encodes to a frame equal to it; a Ping is answered by
// a Pong with its nonce; an EventAck moves the journal's ack to at least its
// seq; a Drain or a RevocationNotice ends the connection (and nothing else
// does); any other frame goes to the Handler and is acked by its seq.

package session

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"bcd/internal/journal"
	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
)

// countingHandler records the frames handed to it.
type countingHandler struct{ frames int }

func (h *countingHandler) Hello() *agentv1.Hello       { return &agentv1.Hello{} }
func (h *countingHandler) Welcomed(*agentv1.Welcome)   {}
func (h *countingHandler) Frame(*agentv1.GatewayFrame) { h.frames++ }
func (h *countingHandler) AppliedGeneration() uint64   { return 0 }

func FuzzGatewayFrame(f *testing.F) {
	for _, frame := range []*agentv1.GatewayFrame{
		{Frame: &agentv1.GatewayFrame_Ping{Ping: &agentv1.Ping{Nonce: 7, ServerTimeMs: 1_767_225_600_000}}},
		{Frame: &agentv1.GatewayFrame_EventAck{EventAck: &agentv1.EventAck{UpToSeq: 3}}},
		{Frame: &agentv1.GatewayFrame_Drain{Drain: &agentv1.Drain{Reason: "r", RetryAfterMs: 10}}},
		{Seq: 4, Frame: &agentv1.GatewayFrame_Cancel{Cancel: &agentv1.Cancel{CommandId: "c"}}},
	} {
		wire, err := proto.Marshal(frame)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(wire)
	}
	// The journal lives in memory-backed storage when there is some: every
	// ack is an fsynced transaction.
	dir := f.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if dir, err = os.MkdirTemp("/dev/shm", "bcd-fuzz-session-"); err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { _ = os.RemoveAll(dir) })
	}
	j, err := journal.Open(filepath.Join(dir, "journal.db"), journal.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = j.Close() })
	handler := &countingHandler{}
	s := New(Config{Journal: j, Handler: handler, Log: slog.New(slog.DiscardHandler)})
	f.Fuzz(func(t *testing.T, data []byte) {
		frame := &agentv1.GatewayFrame{}
		if proto.Unmarshal(data, frame) != nil {
			return
		}
		wire, err := proto.Marshal(frame)
		again := &agentv1.GatewayFrame{}
		if err != nil || proto.Unmarshal(wire, again) != nil || !proto.Equal(again, frame) {
			t.Fatalf("the frame does not re-encode to itself: %v", err)
		}
		var sent []*agentv1.NodeFrame
		send := func(f *agentv1.NodeFrame) error { sent = append(sent, f); return nil }
		before, handled := j.LastAcked(), handler.frames
		// No connection has sent an event: every ack beyond the journal's
		// last event must change nothing (journal.ErrAckBeyond).
		end, err := s.frame(send, frame, 0, j.LastSeq())
		if err != nil {
			t.Fatalf("handling failed: %v", err)
		}
		switch x := frame.GetFrame().(type) {
		case *agentv1.GatewayFrame_Ping:
			if len(sent) != 1 || sent[0].GetPong().GetNonce() != x.Ping.GetNonce() || end != nil {
				t.Fatalf("a Ping answered with %v (end %v)", sent, end)
			}
		case *agentv1.GatewayFrame_EventAck:
			want := before
			if up := x.EventAck.GetUpToSeq(); up <= j.LastSeq() {
				want = max(before, up)
			}
			if j.LastAcked() != want || end != nil || len(sent) != 0 {
				t.Fatalf("acked %d after EventAck %d (was %d)", j.LastAcked(), x.EventAck.GetUpToSeq(), before)
			}
		case *agentv1.GatewayFrame_Drain:
			var d *drained
			if !errors.As(end, &d) || len(sent) != 0 {
				t.Fatalf("a Drain ended with %v", end)
			}
		case *agentv1.GatewayFrame_RevocationNotice:
			if !errors.Is(end, ErrRevoked) {
				t.Fatalf("a RevocationNotice ended with %v", end)
			}
		case *agentv1.GatewayFrame_Welcome:
			if end != nil || len(sent) != 0 || handler.frames != handled {
				t.Fatal("a late Welcome did something")
			}
		default:
			acked := len(sent) == 1 && sent[0].GetEventAck().GetUpToSeq() == frame.GetSeq()
			if end != nil || handler.frames != handled+1 || (frame.GetSeq() > 0) != acked || len(sent) > 1 {
				t.Fatalf("frame %T: end %v, handled %d, sent %v", x, end, handler.frames-handled, sent)
			}
		}
	})
}
