// Tests of the server-time mark against a gateway that walks it: a run of
// reconnects, each welcomed just inside the tolerance ahead of the mark,
// leaves the mark within the tolerance of the anchor's clock, so honest
// Welcomes are still taken, and a gateway really rewound is still refused.

package session

import (
	"testing"
	"time"

	"bcd/internal/proto/agentv1"
	"bcd/internal/testgw"
)

// drainNow ends the connection with a Drain of retry_after_ms 1 and takes
// the next session's Hello.
func (r *rig) drainNow(t *testing.T, s *testgw.Session) *testgw.Session {
	t.Helper()
	s.Send(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_Drain{Drain: &agentv1.Drain{Reason: "again", RetryAfterMs: 1}}})
	ended(t, s)
	next := r.next(t)
	if recv(t, next).GetHello() == nil {
		t.Fatal("the redial's first frame is not a Hello")
	}
	return next
}

func TestARunOfWelcomesEachJustAheadDoesNotWalkTheMarkAway(t *testing.T) {
	r := start(t, nil)
	// An honest first Welcome: the journal's anchor.
	s := r.welcomed(t, 1000)
	r.awaitWelcomed(t)
	// 40 reconnects, each welcomed 4m59s ahead of the mark and drained at
	// once: each alone is within the tolerance of the mark.
	step := MaxServerTimeAhead - time.Second
	for range 40 {
		s = r.drainNow(t, s)
		s.Send(welcome(time.UnixMilli(r.journal.Mark()).Add(step), 1000, 0))
		r.awaitWelcomed(t)
	}
	if ahead := time.Until(time.UnixMilli(r.journal.Mark())); ahead > MaxServerTimeAhead {
		t.Fatalf("40 Welcomes walked the mark %s ahead (at most %s)", ahead.Round(time.Second), MaxServerTimeAhead)
	}
	// An honest Welcome is still taken.
	s = r.drainNow(t, s)
	s.Send(welcome(time.Now(), 1000, 0))
	r.awaitWelcomed(t)
	// A gateway really rewound, an hour before the mark, is still refused.
	mark, welcomes := r.journal.Mark(), r.welcomeCount()
	s = r.drainNow(t, s)
	s.Send(welcome(time.UnixMilli(mark).Add(-time.Hour), 1000, 0))
	ended(t, s)
	if r.welcomeCount() != welcomes || r.journal.Mark() != mark {
		t.Fatal("a Welcome an hour before the mark was taken")
	}
}

func (r *rig) welcomeCount() int {
	r.handler.mu.Lock()
	defer r.handler.mu.Unlock()
	return len(r.handler.welcomes)
}
