// Test fixtures of the update package: testdata/release as updatetest
// loads it (the two release keys, the signed manifest of 0.9.0 at sequence
// 7, its artifact and the refusal cases) and a freshly laid-out slots
// directory.

package update

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"bcd/internal/pki"
	"bcd/internal/update/updatetest"
)

// releaseFixture is testdata/release/release.json with what these tests
// take from it in terms of package update.
type releaseFixture struct{ *updatetest.Release }

func loadRelease(t *testing.T) *releaseFixture {
	t.Helper()
	return &releaseFixture{updatetest.Load(t)}
}

// config is the [update] table pinning the fixture's keys.
func (f *releaseFixture) config() *Config {
	return &Config{Threshold: f.Threshold, MinSequence: f.MinSequence, ReleaseKeys: f.SPKIs(), ReleaseKeyPins: f.Pins()}
}

func (f *releaseFixture) policy(t *testing.T) pki.ReleasePolicy {
	t.Helper()
	p, err := f.config().Policy()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// envelope is the good manifest, or with a name that case's.
func (f *releaseFixture) envelope(t *testing.T, name string) *pki.Envelope {
	t.Helper()
	if name == "" {
		return f.Envelope(t)
	}
	return f.CaseEnvelope(t, name)
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// installed lays out a slots directory with "installed" in bcd-a and
// returns Slots over it that take this process's files as staged.
func installed(t *testing.T, f *releaseFixture) *Slots {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(t.TempDir(), "bcd")
	if err := os.WriteFile(bin, []byte("installed bcd"), 0o755); err != nil {
		t.Fatal(err)
	}
	slots := filepath.Join(dir, "slots")
	if err := Install(slots, bin); err != nil {
		t.Fatal(err)
	}
	return &Slots{
		Dir: slots, Staged: filepath.Join(dir, "staging", "bcd.staged"), StagedUID: uint32(os.Geteuid()),
		Policy: f.policy(t), OS: "linux", Arch: "amd64",
	}
}

func stage(t *testing.T, s *Slots, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(s.Staged), 0o700); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(s.Staged)
	if err := os.WriteFile(s.Staged, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func current(t *testing.T, s *Slots) string {
	t.Helper()
	c, err := s.Current()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s", code)
	}
	got := string(CodeOf(err))
	if got == "" {
		got = string(pki.CodeOf(err))
	}
	if got != code {
		t.Fatalf("error %q has code %q, want %q", err, got, code)
	}
}
