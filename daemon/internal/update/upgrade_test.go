// Tests of daemon.upgrade's work (download, verification, staging, swap)
// and of what a starting bcd does about upgrade.json (confirm, roll back,
// report the failure).

package update

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"bcd/internal/pki"
)

// server serves the artifact at /releases/0.9.0/bcd-linux-amd64.
func server(t *testing.T, body []byte) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/releases/0.9.0/bcd-linux-amd64" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// params is a daemon.upgrade's params for a manifest of artifact at url.
func params(t *testing.T, f *releaseFixture, version string, sequence uint64, url string, artifact []byte, signers int) []byte {
	t.Helper()
	m := pki.Manifest{Version: version, Sequence: sequence, Artifacts: []pki.Artifact{{
		OS: "linux", Arch: "amd64", SHA256: digest(artifact), Size: uint64(len(artifact)), URL: url + "/releases/0.9.0/bcd-linux-amd64",
	}}}
	env := f.SignWith(t, m, signers)
	data, err := json.Marshal(map[string]json.RawMessage{"manifest": env.JSON()})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func updater(t *testing.T, f *releaseFixture, s *Slots, version string) *Updater {
	return &Updater{Store: s, Policy: f.policy(t), Staged: s.Staged, Version: version, OS: "linux", Arch: "amd64", ConfirmTimeout: 3 * time.Second}
}

func TestUpgradeSwapsAndConfirms(t *testing.T) {
	f := loadRelease(t)
	s := installed(t, f)
	url := server(t, f.Artifact)
	out, err := updater(t, f, s, "0.1.0").Upgrade(context.Background(), "cmd-1", params(t, f, "0.9.0", 7, url, f.Artifact, 2))
	if err != nil {
		t.Fatal(err)
	}
	if out.Exec != s.Entrypoint() || out.Output != nil || out.Record.Slot != SlotB || out.Record.ConfirmTimeoutMs != 3000 {
		t.Fatalf("outcome %+v", out)
	}
	if current(t, s) != SlotB {
		t.Fatal("not swapped")
	}
	if _, err := os.Stat(s.Staged); !os.IsNotExist(err) {
		t.Fatalf("the staged file remains: %v", err)
	}
	// The new binary starts: it waits for its Welcome.
	newer := updater(t, f, s, "0.9.0")
	res, err := newer.Resume()
	if err != nil || res.Await == nil || res.Failed != nil {
		t.Fatalf("resume: %+v %v", res, err)
	}
	if d := time.Until(res.Await.Deadline()); d <= 0 || d > 3*time.Second {
		t.Fatalf("deadline in %s", d)
	}
	output, err := res.Await.Welcomed()
	if err != nil {
		t.Fatal(err)
	}
	if string(output) != `{"version":"0.9.0","sequence":7,"previous":"0.1.0","slot":"bcd-b"}` {
		t.Fatalf("output %s", output)
	}
	if again, _ := res.Await.Welcomed(); again != nil {
		t.Fatal("a second Welcome confirmed again")
	}
	if exec, _ := res.Await.Expire(); exec != "" {
		t.Fatal("a confirmed upgrade expired")
	}
	if p, _ := s.Pending(); p != nil {
		t.Fatal("upgrade.json remains")
	}
	if res, err := newer.Resume(); err != nil || res.Await != nil || res.Failed != nil {
		t.Fatalf("a second start: %+v %v", res, err)
	}
}

func TestUpgradeOfTheRunningVersion(t *testing.T) {
	f := loadRelease(t)
	s := installed(t, f)
	out, err := updater(t, f, s, "0.9.0").Upgrade(context.Background(), "cmd-1", params(t, f, "0.9.0", 7, "http://127.0.0.1:1", f.Artifact, 2))
	if err != nil {
		t.Fatal(err)
	}
	if out.Exec != "" || string(out.Output) != `{"version":"0.9.0","sequence":7,"previous":"0.9.0","slot":"bcd-a"}` {
		t.Fatalf("outcome %+v (%s)", out, out.Output)
	}
	if current(t, s) != SlotA {
		t.Fatal("swapped")
	}
}

func TestUpgradeRefusals(t *testing.T) {
	f := loadRelease(t)
	good := server(t, f.Artifact)
	other := server(t, []byte("bcd 0.9.0 other artifact!!\n"))
	cases := []struct {
		name, code string
		params     []byte
	}{
		{"params not json", string(CodeParams), []byte("nope")},
		{"no manifest", string(CodeParams), []byte(`{}`)},
		{"under threshold", "release-threshold", params(t, f, "0.9.0", 7, good, f.Artifact, 1)},
		{"lower sequence", "release-sequence", params(t, f, "0.9.0", 4, good, f.Artifact, 2)},
		{"another digest", "release-digest", params(t, f, "0.9.0", 7, other, f.Artifact, 2)},
		{"download fails", string(CodeDownload), params(t, f, "0.9.1", 7, good, f.Artifact, 2)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := installed(t, f)
			u := updater(t, f, s, "0.1.0")
			if c.code == string(CodeDownload) {
				// An empty directory answers 404 for every path.
				u.HTTP = &http.Client{Transport: http.NewFileTransport(http.Dir(t.TempDir()))}
			}
			_, err := u.Upgrade(context.Background(), "cmd", c.params)
			wantCode(t, err, c.code)
			if current(t, s) != SlotA {
				t.Fatal("a refused upgrade swapped")
			}
			if p, _ := s.Pending(); p != nil {
				t.Fatal("a refused upgrade wrote upgrade.json")
			}
		})
	}
}

func TestNeverConnectedRollsBack(t *testing.T) {
	f := loadRelease(t)
	s := installed(t, f)
	url := server(t, f.Artifact)
	if _, err := updater(t, f, s, "0.1.0").Upgrade(context.Background(), "cmd-1", params(t, f, "0.9.0", 7, url, f.Artifact, 2)); err != nil {
		t.Fatal(err)
	}
	res, err := updater(t, f, s, "0.9.0").Resume()
	if err != nil || res.Await == nil {
		t.Fatalf("resume: %+v %v", res, err)
	}
	exec, err := res.Await.Expire()
	if err != nil || exec != s.Entrypoint() {
		t.Fatalf("expire: %q %v", exec, err)
	}
	if out, _ := res.Await.Welcomed(); out != nil {
		t.Fatal("a Welcome after the rollback confirmed")
	}
	if current(t, s) != SlotA {
		t.Fatal("not rolled back")
	}
	// The previous binary starts again: it records the failure.
	res, err = updater(t, f, s, "0.1.0").Resume()
	if err != nil || res.Failed == nil || res.Failed.CommandID != "cmd-1" || res.Reason != "rollback: 0.9.0 never connected" {
		t.Fatalf("resume of the previous binary: %+v %v", res, err)
	}
	failed, _ := s.Failed()
	if len(failed) != 1 || failed[0].Version != "0.9.0" {
		t.Fatalf("failed.json %+v", failed)
	}
	_, err = updater(t, f, s, "0.1.0").Upgrade(context.Background(), "cmd-2", params(t, f, "0.9.0", 7, url, f.Artifact, 2))
	wantCode(t, err, string(CodeReleaseFailed))
}

func TestPreviousBinaryAfterAFailedExec(t *testing.T) {
	f := loadRelease(t)
	s := installed(t, f)
	url := server(t, f.Artifact)
	if _, err := updater(t, f, s, "0.1.0").Upgrade(context.Background(), "cmd-1", params(t, f, "0.9.0", 7, url, f.Artifact, 2)); err != nil {
		t.Fatal(err)
	}
	// The exec failed and the supervisor started the entrypoint again: the
	// previous binary, still version 0.1.0, finds upgrade.json not rolled back.
	res, err := updater(t, f, s, "0.1.0").Resume()
	if err != nil || res.Failed == nil {
		t.Fatalf("resume: %+v %v", res, err)
	}
	if current(t, s) != SlotA {
		t.Fatal("not rolled back")
	}
}

func TestASignedReleaseOfALowerSequenceDoesNotDowngradeTheInstalledOne(t *testing.T) {
	f := loadRelease(t)
	s := installed(t, f)
	url := server(t, f.Artifact)
	if _, err := updater(t, f, s, "0.1.0").Upgrade(context.Background(), "cmd-1", params(t, f, "0.9.0", 7, url, f.Artifact, 2)); err != nil {
		t.Fatal(err)
	}
	res, err := updater(t, f, s, "0.9.0").Resume()
	if err != nil || res.Await == nil {
		t.Fatalf("resume: %+v %v", res, err)
	}
	if _, err := res.Await.Welcomed(); err != nil {
		t.Fatal(err)
	}
	if in, err := s.Installed(); err != nil || in == nil || in.Version != "0.9.0" || in.Sequence != 7 {
		t.Fatalf("installed.json %+v %v", in, err)
	}
	// 0.8.0 at sequence 6, signed and above min_sequence: a downgrade.
	_, err = updater(t, f, s, "0.9.0").Upgrade(context.Background(), "cmd-2", params(t, f, "0.8.0", 6, url, f.Artifact, 2))
	if pki.CodeOf(err) != pki.CodeReleaseRollback {
		t.Fatalf("downgrade: %v", err)
	}
	// The store refuses it too (the helper's slots check on their own).
	os.MkdirAll(filepath.Dir(s.Staged), 0o700)
	os.WriteFile(s.Staged, f.Artifact, 0o600)
	if _, err := s.Prepare(f.SignWith(t, pki.Manifest{Version: "0.8.0", Sequence: 6, Artifacts: []pki.Artifact{{
		OS: "linux", Arch: "amd64", SHA256: digest(f.Artifact), Size: uint64(len(f.Artifact)), URL: url}}}, 2)); pki.CodeOf(err) != pki.CodeReleaseRollback {
		t.Fatalf("prepare of a downgrade: %v", err)
	}
	if current(t, s) != SlotB {
		t.Fatal("the downgrade swapped")
	}
	// The installed sequence itself may come again (a re-delivery).
	if out, err := updater(t, f, s, "0.9.0").Upgrade(context.Background(), "cmd-3", params(t, f, "0.9.0", 7, url, f.Artifact, 2)); err != nil || out.Exec != "" {
		t.Fatalf("the installed release again: %+v %v", out, err)
	}
}

func TestAnExpiredManifestIsRefused(t *testing.T) {
	f := loadRelease(t)
	s := installed(t, f)
	m := pki.Manifest{Version: "0.9.0", Sequence: 7, ExpiresAtMs: time.Now().Add(-time.Minute).UnixMilli(), Artifacts: []pki.Artifact{{
		OS: "linux", Arch: "amd64", SHA256: digest(f.Artifact), Size: uint64(len(f.Artifact)), URL: "http://127.0.0.1:1/x"}}}
	data, _ := json.Marshal(map[string]json.RawMessage{"manifest": f.SignWith(t, m, 2).JSON()})
	if _, err := updater(t, f, s, "0.1.0").Upgrade(context.Background(), "cmd-1", data); pki.CodeOf(err) != pki.CodeReleaseExpired {
		t.Fatalf("expired manifest: %v", err)
	}
	if current(t, s) != SlotA {
		t.Fatal("swapped")
	}
}
