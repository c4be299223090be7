// Tests of the daemon section's reconciler: a section converged by the
// steps of daemon.upgrade (download in the background, swap, exec, the
// Welcome's confirmation: APPLIED), a build that never connects rolled back
// and the section FAILED RolledBack for good, and each refusal with its
// reason; nothing swapped by a refused section.

package update

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"bcd/internal/converge"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
)

// sectionNode is one bcd's daemon section reconciler over the slots s.
type sectionNode struct {
	r     *SectionReconciler
	u     *Updater
	execs chan string
	wakes chan struct{}
}

func newSectionNode(t *testing.T, f *releaseFixture, s *Slots, version string) *sectionNode {
	n := &sectionNode{u: updater(t, f, s, version), execs: make(chan string, 4), wakes: make(chan struct{}, 4)}
	n.r = NewSection(SectionConfig{Updater: n.u, Version: version, Retry: time.Second,
		Exec: func(path string) { n.execs <- path }, Wake: func() { n.wakes <- struct{}{} }})
	return n
}

// section is a daemon section naming version at sequence with a manifest of
// the fixture's artifact served at url, signed by signers release keys (0: no manifest).
func section(t *testing.T, f *releaseFixture, version string, sequence uint64, url string, signers int) *agentv1.DaemonSection {
	t.Helper()
	sec := &agentv1.DaemonSection{Version: version, Sequence: sequence}
	if signers > 0 {
		m := pki.Manifest{Version: version, Sequence: sequence, Artifacts: []pki.Artifact{{
			OS: "linux", Arch: "amd64", SHA256: digest(f.Artifact), Size: uint64(len(f.Artifact)), URL: url + "/releases/0.9.0/bcd-linux-amd64",
		}}}
		sec.Manifest = f.SignWith(t, m, signers).Proto()
	}
	return sec
}

func (n *sectionNode) pass(t *testing.T, generation uint64, sec *agentv1.DaemonSection) converge.Result {
	t.Helper()
	res, err := n.r.Reconcile(context.Background(), converge.Input{Spec: &agentv1.NodeSpec{NodeId: "node_0", Generation: generation, Daemon: sec}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (n *sectionNode) awaitWake(t *testing.T) {
	t.Helper()
	select {
	case <-n.wakes:
	case <-time.After(10 * time.Second):
		t.Fatal("the download never woke the section")
	}
}

func want(t *testing.T, res converge.Result, state agentv1.SectionState, reason string) {
	t.Helper()
	if res.State != state || res.Reason != reason {
		t.Fatalf("%s %s (%s), want %s %s", res.State, res.Reason, res.Message, state, reason)
	}
}

const (
	applied     = agentv1.SectionState_SECTION_STATE_APPLIED
	progressing = agentv1.SectionState_SECTION_STATE_PROGRESSING
	failed      = agentv1.SectionState_SECTION_STATE_FAILED
)

// swapTo takes n through a download and a swap to the section's release,
// and returns what it handed to exec.
func (n *sectionNode) swapTo(t *testing.T, generation uint64, sec *agentv1.DaemonSection) string {
	t.Helper()
	want(t, n.pass(t, generation, sec), progressing, ReasonDownloading)
	n.awaitWake(t)
	res := n.pass(t, generation, sec)
	want(t, res, progressing, ReasonSwapped)
	if len(n.execs) != 0 {
		t.Fatal("exec before the pass was persisted")
	}
	res.Then()
	return <-n.execs
}

func TestTheSectionSwapsExecsAndIsAppliedOnceConfirmed(t *testing.T) {
	f := loadRelease(t)
	s := installed(t, f)
	sec := section(t, f, "0.9.0", 7, server(t, f.Artifact), 2)
	if exec := newSectionNode(t, f, s, "0.1.0").swapTo(t, 4, sec); exec != s.Entrypoint() {
		t.Fatalf("exec %q", exec)
	}
	rec, _ := s.Pending()
	if current(t, s) != SlotB || rec == nil || rec.Generation != 4 || rec.CommandID != "" || rec.Previous != "0.1.0" {
		t.Fatalf("current %s, upgrade.json %+v", current(t, s), rec)
	}
	// The new binary: waiting for its Welcome, then confirmed.
	newer := newSectionNode(t, f, s, "0.9.0")
	resumed, err := newer.u.Resume()
	if err != nil || resumed.Await == nil {
		t.Fatalf("resume %+v %v", resumed, err)
	}
	want(t, newer.pass(t, 4, sec), progressing, ReasonAwaitingWelcome)
	if _, err := resumed.Await.Welcomed(); err != nil {
		t.Fatal(err)
	}
	res := newer.pass(t, 4, sec)
	want(t, res, applied, converge.ReasonApplied)
	if res.Message != "bcd runs 0.9.0 (sequence 7)" {
		t.Fatalf("message %q", res.Message)
	}
	if in, _ := s.Installed(); in == nil || in.Version != "0.9.0" {
		t.Fatalf("installed.json %+v", in)
	}
}

func TestABuildThatNeverConnectsFailsTheSectionForGood(t *testing.T) {
	f := loadRelease(t)
	s := installed(t, f)
	url := server(t, f.Artifact)
	sec := section(t, f, "0.9.0", 7, url, 2)
	newSectionNode(t, f, s, "0.1.0").swapTo(t, 2, sec)
	resumed, err := updater(t, f, s, "0.9.0").Resume()
	if err != nil || resumed.Await == nil {
		t.Fatalf("resume %+v %v", resumed, err)
	}
	if _, err := resumed.Await.Expire(); err != nil {
		t.Fatal(err)
	}
	// The previous binary starts again and settles the upgrade.
	previous := newSectionNode(t, f, s, "0.1.0")
	back, err := previous.u.Resume()
	if err != nil || back.Failed == nil || back.Failed.Generation != 2 || back.Failed.CommandID != "" {
		t.Fatalf("resume of the previous binary %+v %v", back, err)
	}
	res := previous.pass(t, 2, sec)
	want(t, res, failed, ReasonRolledBack)
	if !strings.Contains(res.Message, "0.9.0 (sequence 7) was rolled back") {
		t.Fatalf("message %q", res.Message)
	}
	// A later generation naming it again is refused at once: no download.
	want(t, previous.pass(t, 3, sec), failed, ReasonRolledBack)
	if current(t, s) != SlotA || len(previous.wakes) != 0 {
		t.Fatal("the failed release was tried again")
	}
	// The running version converges as it is.
	want(t, previous.pass(t, 4, &agentv1.DaemonSection{Version: "0.1.0"}), applied, converge.ReasonApplied)
}

func TestSectionRefusals(t *testing.T) {
	f := loadRelease(t)
	good := server(t, f.Artifact)
	other := server(t, []byte("bcd 0.9.0 other artifact!!\n"))
	mismatch := section(t, f, "0.9.0", 7, good, 2)
	mismatch.Sequence = 8
	cases := []struct {
		name, reason, message string
		sec                   *agentv1.DaemonSection
	}{
		{"no manifest", ReasonReleaseRefused, "without its signed manifest", section(t, f, "0.9.0", 7, good, 0)},
		{"under threshold", ReasonReleaseRefused, "release-threshold: ", section(t, f, "0.9.0", 7, good, 1)},
		{"lower sequence", ReasonReleaseRefused, "release-sequence: ", section(t, f, "0.9.0", 4, good, 2)},
		{"another release", ReasonReleaseRefused, "the manifest is 0.9.0 (sequence 7), the section names 0.9.0 (sequence 8)", mismatch},
		{"another digest", ReasonReleaseRefused, "release-digest: ", section(t, f, "0.9.0", 7, other, 2)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := installed(t, f)
			n := newSectionNode(t, f, s, "0.1.0")
			res := n.pass(t, 2, c.sec)
			if res.State == progressing && res.Reason == ReasonDownloading {
				n.awaitWake(t)
				res = n.pass(t, 2, c.sec)
			}
			want(t, res, failed, c.reason)
			if !strings.Contains(res.Message, c.message) {
				t.Fatalf("message %q, want %q", res.Message, c.message)
			}
			if p, _ := s.Pending(); current(t, s) != SlotA || p != nil {
				t.Fatal("a refused section swapped")
			}
		})
	}
}

func TestAFailedDownloadIsTriedAgain(t *testing.T) {
	f := loadRelease(t)
	s := installed(t, f)
	n := newSectionNode(t, f, s, "0.1.0")
	// An empty directory answers 404 for every path.
	n.u.HTTP = &http.Client{Transport: http.NewFileTransport(http.Dir(t.TempDir()))}
	sec := section(t, f, "0.9.0", 7, "http://127.0.0.1:1", 2)
	want(t, n.pass(t, 2, sec), progressing, ReasonDownloading)
	n.awaitWake(t)
	res := n.pass(t, 2, sec)
	want(t, res, progressing, ReasonDownloadFailed)
	if res.RequeueAfter != time.Second || !strings.HasPrefix(res.Message, "release-download: ") {
		t.Fatalf("requeue %s, message %q", res.RequeueAfter, res.Message)
	}
	// The next pass downloads again.
	n.u.HTTP = nil
	sec = section(t, f, "0.9.0", 7, server(t, f.Artifact), 2)
	n.swapTo(t, 2, sec)
}

func TestWithoutUpdateOnlyTheRunningVersionConverges(t *testing.T) {
	r := NewSection(SectionConfig{Version: "0.1.0"})
	pass := func(sec *agentv1.DaemonSection) converge.Result {
		res, err := r.Reconcile(context.Background(), converge.Input{Spec: &agentv1.NodeSpec{Generation: 1, Daemon: sec}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	want(t, pass(nil), applied, converge.ReasonApplied)
	want(t, pass(&agentv1.DaemonSection{Version: "0.1.0"}), applied, converge.ReasonApplied)
	want(t, pass(&agentv1.DaemonSection{Version: "0.9.0", Sequence: 7}), failed, ReasonNotConfigured)
	// Not behind an entrypoint: the same.
	f := loadRelease(t)
	n := NewSection(SectionConfig{Version: "0.1.0", Updater: &Updater{Store: NotInstalled{}, Policy: f.policy(t), Version: "0.1.0"}})
	res, _ := n.Reconcile(context.Background(), converge.Input{Spec: &agentv1.NodeSpec{Generation: 1,
		Daemon: section(t, f, "0.9.0", 7, "http://127.0.0.1:1", 2)}})
	want(t, res, failed, ReasonNotConfigured)
}

func TestASectionWaitsForACommandsUpgrade(t *testing.T) {
	f := loadRelease(t)
	s := installed(t, f)
	url := server(t, f.Artifact)
	if _, err := updater(t, f, s, "0.1.0").Upgrade(context.Background(), "cmd-1", params(t, f, "0.9.0", 7, url, f.Artifact, 2)); err != nil {
		t.Fatal(err)
	}
	n := newSectionNode(t, f, s, "0.1.0")
	res := n.pass(t, 2, section(t, f, "0.9.1", 8, url, 2))
	want(t, res, progressing, ReasonUpgradePending)
	if !strings.Contains(res.Message, "command cmd-1") || res.RequeueAfter == 0 {
		t.Fatalf("%+v", res)
	}
}
