// Tests of the reconciler core: every report carries a status per section,
// persisted with the applied spec; a made-up section plugs in with one
// reconciler, in Order, and is passed again when it asks (also after a
// restart, and never for a superseded generation); an error aborts the
// pass; the trust and holds sections report their own outcome.

package converge

import (
	"context"
	"crypto/ed25519"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
)

// section is a made-up reconciler of the instances section: it returns its
// results in turn (the last one again and again) and records its inputs.
type section struct {
	mu      sync.Mutex
	results []Result
	err     error
	inputs  []Input
}

func (s *section) Section() string { return SectionInstances }

func (s *section) Reconcile(_ context.Context, in Input) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inputs = append(s.inputs, in)
	if s.err != nil {
		return Result{}, s.err
	}
	res := s.results[0]
	if len(s.results) > 1 {
		s.results = s.results[1:]
	}
	return res, nil
}

func (s *section) calls() []Input {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Input(nil), s.inputs...)
}

var progressing = Result{State: agentv1.SectionState_SECTION_STATE_PROGRESSING, Reason: "Retrying", Message: "instance i1 not up yet"}

// states is "trust=SECTION_STATE_APPLIED/Applied/1 …" of a report.
func states(r *agentv1.StatusReport) string {
	var parts []string
	for _, st := range r.GetSections() {
		parts = append(parts, st.GetSection()+"="+st.GetState().String()+"/"+st.GetReason()+"/"+strconv.FormatUint(st.GetGeneration(), 10))
	}
	return strings.Join(parts, " ")
}

// awaitReport waits until the journal's last report matches want.
func (r *rig) awaitReport(t *testing.T, want string) *agentv1.StatusReport {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		events, _ := r.j.Unacked(0)
		for i := len(events) - 1; i >= 0; i-- {
			if rep := events[i].GetStatusReport(); rep != nil {
				if states(rep) == want {
					return rep
				}
				break
			}
		}
		select {
		case <-r.notify:
		case <-deadline:
			t.Fatalf("no report with sections %q; last %q", want, states(r.lastReport(t)))
		}
	}
}

func TestEveryReportCarriesEverySectionPersistedWithTheSpec(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, dir, false, "")
	if rep, _ := r.c.Report(); len(rep.GetSections()) != 0 {
		t.Fatalf("sections before any spec: %v", rep.GetSections())
	}
	r.c.Apply(desired(spec(1, hold("a", 0))))
	if got := states(r.lastReport(t)); got != "trust=SECTION_STATE_APPLIED/Applied/1 holds=SECTION_STATE_APPLIED/Applied/1" {
		t.Fatalf("sections %s", got)
	}
	r.c.Apply(desired(spec(2, hold("a", 0), hold("b", 0))))
	rep := r.lastReport(t)
	if got := states(rep); got != "trust=SECTION_STATE_APPLIED/Applied/2 holds=SECTION_STATE_FAILED/HoldFailed/2" {
		t.Fatalf("sections %s", got)
	}
	if msg := rep.GetSections()[1].GetMessage(); !strings.Contains(msg, "b: gpu-held") {
		t.Fatalf("holds message %q", msg)
	}
	// A restart keeps them, and the agent's next report carries them.
	r.c.Stop()
	r.j.Close()
	r = newRig(t, dir, false, "")
	again, err := r.c.Report()
	if err != nil || !proto.Equal(&agentv1.StatusReport{Sections: again.GetSections()}, &agentv1.StatusReport{Sections: rep.GetSections()}) {
		t.Fatalf("after a restart %v, %v", again.GetSections(), err)
	}
}

func TestAMadeUpSectionPlugsInAndIsPassedAgainWhileProgressing(t *testing.T) {
	done := applied("instance i1 running")
	progressing := progressing
	progressing.RequeueAfter = time.Millisecond
	s := &section{results: []Result{progressing, progressing, done}}
	r := newRigWith(t, t.TempDir(), false, "", s)
	if ok, err := r.c.Apply(desired(spec(1))); !ok || err != nil {
		t.Fatalf("apply: %v %v", ok, err)
	}
	if got := states(r.lastReport(t)); got != "trust=SECTION_STATE_APPLIED/Applied/1 holds=SECTION_STATE_APPLIED/Applied/1 instances=SECTION_STATE_PROGRESSING/Retrying/1" {
		t.Fatalf("sections %s", got)
	}
	r.awaitReport(t, "trust=SECTION_STATE_APPLIED/Applied/1 holds=SECTION_STATE_APPLIED/Applied/1 instances=SECTION_STATE_APPLIED/Applied/1")
	calls := s.calls()
	if len(calls) != 3 || calls[0].Previous != nil || calls[2].Spec.GetGeneration() != 1 || !proto.Equal(calls[2].Previous, calls[2].Spec) {
		t.Fatalf("inputs %v", calls)
	}
	// The unchanged PROGRESSING of the second pass journaled no report.
	n := 0
	events, _ := r.j.Unacked(0)
	for _, e := range events {
		if e.GetStatusReport() != nil {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d reports, want the apply's and the APPLIED re-pass's", n)
	}
}

func TestAProgressingSectionIsPassedAgainAfterARestart(t *testing.T) {
	dir := t.TempDir()
	later := progressing
	later.RequeueAfter = time.Hour
	r := newRigWith(t, dir, false, "", &section{results: []Result{later}})
	r.c.Apply(desired(spec(1)))
	r.c.Stop()
	r.j.Close()
	s := &section{results: []Result{applied("")}}
	r = newRigWith(t, dir, false, "", s)
	r.c.Start()
	r.awaitReport(t, "trust=SECTION_STATE_APPLIED/Applied/1 holds=SECTION_STATE_APPLIED/Applied/1 instances=SECTION_STATE_APPLIED/Applied/1")
	if calls := s.calls(); len(calls) != 1 {
		t.Fatalf("%d passes after the restart, want 1 (trust and holds were done)", len(calls))
	}
}

func TestANewGenerationCancelsAPendingRePass(t *testing.T) {
	later := progressing
	later.RequeueAfter = time.Hour
	s := &section{results: []Result{later, applied("")}}
	r := newRigWith(t, t.TempDir(), false, "", s)
	r.c.Apply(desired(spec(1)))
	r.c.mu.Lock()
	pending := len(r.c.requeues)
	r.c.mu.Unlock()
	if pending != 1 {
		t.Fatalf("%d re-passes pending, want the one asked for", pending)
	}
	r.c.Apply(desired(spec(2)))
	r.c.mu.Lock()
	pending = len(r.c.requeues)
	r.c.mu.Unlock()
	if pending != 0 || len(s.calls()) != 2 {
		t.Fatalf("%d re-passes pending, %d passes", pending, len(s.calls()))
	}
}

func TestAReconcilerErrorAbortsThePass(t *testing.T) {
	s := &section{err: errors.New("the hypervisor is gone")}
	r := newRigWith(t, t.TempDir(), false, "", s)
	if ok, err := r.c.Apply(desired(spec(1, hold("a", 0)))); ok || err == nil || !strings.Contains(err.Error(), "section instances: the hypervisor is gone") {
		t.Fatalf("apply: %v %v", ok, err)
	}
	if g := r.c.AppliedGeneration(); g != 0 || len(r.applied) != 0 {
		t.Fatalf("applied generation %d after an aborted pass", g)
	}
	if data := r.j.Get(allocationsKey); data != nil {
		t.Fatalf("the aborted pass persisted holds: %s", data)
	}
}

func TestReconcilersAreOnePerSectionOfTheSpec(t *testing.T) {
	if _, err := inOrder([]Reconciler{&section{}, &section{}}); !errors.Is(err, ErrSection) {
		t.Fatalf("two of a section: %v", err)
	}
	if _, err := inOrder([]Reconciler{bogus{}}); !errors.Is(err, ErrSection) {
		t.Fatalf("a section outside Order: %v", err)
	}
	list, err := inOrder([]Reconciler{&section{}, &holdsReconciler{}, &trustReconciler{}})
	if err != nil || list[0].Section() != SectionTrust || list[1].Section() != SectionHolds || list[2].Section() != SectionInstances {
		t.Fatalf("order %v, %v", list, err)
	}
}

type bogus struct{}

func (bogus) Section() string                                  { return "gpus" }
func (bogus) Reconcile(context.Context, Input) (Result, error) { return applied(""), nil }

func TestTheTrustSectionSaysWhetherTheBundleWasTaken(t *testing.T) {
	r := newRig(t, t.TempDir(), true, "")
	rotation := func(keys ...ed25519.PrivateKey) *agentv1.TrustSection {
		payload, _ := proto.Marshal(bundle(2))
		env := &pki.Envelope{PayloadType: pki.PayloadTypeTrustBundle, Payload: payload}
		for _, k := range keys {
			one, _ := pki.SignEnvelope(nil, pki.PayloadTypeTrustBundle, payload, k)
			env.Signatures = append(env.Signatures, one.Signatures...)
		}
		return &agentv1.TrustSection{TrustBundle: env.Proto()}
	}
	trustOf := func() *agentv1.SectionStatus { return r.lastReport(t).GetSections()[0] }
	s := spec(1)
	s.Trust = rotation(strangers...)
	r.c.Apply(desired(s, root))
	if st := trustOf(); st.GetState() != agentv1.SectionState_SECTION_STATE_FAILED || st.GetReason() != ReasonRotationRefused || !strings.HasPrefix(st.GetMessage(), "trust-") {
		t.Fatalf("a bundle signed by strangers: %v", st)
	}
	s = spec(2)
	s.Trust = rotation(approvers...)
	r.c.Apply(desired(s, root))
	if st := trustOf(); st.GetState() != agentv1.SectionState_SECTION_STATE_APPLIED || !strings.Contains(st.GetMessage(), "rotated to trust bundle sequence 2") {
		t.Fatalf("a rotation: %v", st)
	}
	s = spec(3)
	s.Trust = rotation(approvers...)
	r.c.Apply(desired(s, root))
	if st := trustOf(); st.GetState() != agentv1.SectionState_SECTION_STATE_APPLIED || !strings.Contains(st.GetMessage(), "is current") {
		t.Fatalf("the current bundle again: %v", st)
	}
}

func TestThenRunsOnceThePassIsPersistedAndReported(t *testing.T) {
	var r *rig
	var seen string
	last := progressing
	last.Then = func() {
		// What the next process would read: the applied spec, the
		// section's status, and the report journaled.
		st := loadedStatus(t, r)
		seen = strconv.FormatUint(r.c.AppliedGeneration(), 10) + " " + st + " " + states(r.lastReport(t))
	}
	r = newRigWith(t, t.TempDir(), false, "", &section{results: []Result{last}})
	r.c.Apply(desired(spec(1)))
	want := "1 instances=SECTION_STATE_PROGRESSING/Retrying/1 trust=SECTION_STATE_APPLIED/Applied/1 holds=SECTION_STATE_APPLIED/Applied/1 instances=SECTION_STATE_PROGRESSING/Retrying/1"
	if seen != want {
		t.Fatalf("then saw %q, want %q", seen, want)
	}
}

// loadedStatus is the persisted status of the instances section.
func loadedStatus(t *testing.T, r *rig) string {
	t.Helper()
	m, err := loadStatuses(r.j)
	if err != nil || m[SectionInstances] == nil {
		t.Fatalf("persisted statuses %v %v", m, err)
	}
	return states(&agentv1.StatusReport{Sections: []*agentv1.SectionStatus{m[SectionInstances]}})
}
