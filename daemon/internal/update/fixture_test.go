// Test fixtures of the update package: testdata/release (the two release
// keys, the signed manifest of 0.9.0 at sequence 7, its artifact and the
// refusal cases) and a freshly laid-out slots directory.

package update

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"bcd/internal/pki"
)

// releaseFixture is testdata/release/release.json.
type releaseFixture struct {
	Keys []struct {
		Label, SPKI, Pin, PrivatePkcs8 string
	} `json:"keys"`
	Threshold   int    `json:"threshold"`
	MinSequence uint64 `json:"minSequence"`
	Artifact    []byte `json:"artifact"`
	Manifest    string `json:"manifest"`
	Cases       []struct {
		Name  string `json:"name"`
		Input struct {
			Envelope string `json:"envelope"`
			OS       string `json:"os"`
			Arch     string `json:"arch"`
			Artifact []byte `json:"artifact"`
		} `json:"input"`
		Error string `json:"error"`
	} `json:"cases"`
}

const releaseJSON = "../../../testdata/release/release.json"

func loadRelease(t *testing.T) *releaseFixture {
	t.Helper()
	data, err := os.ReadFile(releaseJSON)
	if err != nil {
		t.Fatal(err)
	}
	f := &releaseFixture{}
	if err := json.Unmarshal(data, f); err != nil {
		t.Fatal(err)
	}
	return f
}

// config is the [update] table pinning the fixture's keys.
func (f *releaseFixture) config() *Config {
	c := &Config{Threshold: f.Threshold, MinSequence: f.MinSequence}
	for _, k := range f.Keys {
		c.ReleaseKeys = append(c.ReleaseKeys, k.SPKI)
		c.ReleaseKeyPins = append(c.ReleaseKeyPins, k.Pin)
	}
	return c
}

func (f *releaseFixture) policy(t *testing.T) pki.ReleasePolicy {
	t.Helper()
	p, err := f.config().Policy()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (f *releaseFixture) signers(t *testing.T) []crypto.Signer {
	t.Helper()
	var out []crypto.Signer
	for _, k := range f.Keys {
		der, err := base64.StdEncoding.DecodeString(k.PrivatePkcs8)
		if err != nil {
			t.Fatal(err)
		}
		key, err := x509.ParsePKCS8PrivateKey(der)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, key.(ed25519.PrivateKey))
	}
	return out
}

func (f *releaseFixture) envelope(t *testing.T, name string) *pki.Envelope {
	t.Helper()
	text := f.Manifest
	if name != "" {
		text = ""
		for _, c := range f.Cases {
			if c.Name == name {
				text = c.Input.Envelope
			}
		}
		if text == "" {
			t.Fatalf("no case %q in %s", name, releaseJSON)
		}
	}
	env, err := pki.ParseEnvelopeJSON([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// sign signs a manifest with the first n fixture keys.
func (f *releaseFixture) sign(t *testing.T, m pki.Manifest, n int) *pki.Envelope {
	t.Helper()
	payload, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	env, err := pki.SignEnvelope(rand.Reader, pki.PayloadTypeRelease, payload, f.signers(t)[:n]...)
	if err != nil {
		t.Fatal(err)
	}
	return env
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

// caseInput is the input of a release case: the platform and the bytes
// the manifest is checked against.
type caseInput struct {
	OS, Arch string
	Artifact []byte
}

func (f *releaseFixture) input(t *testing.T, name string) caseInput {
	t.Helper()
	for _, c := range f.Cases {
		if c.Name == name {
			return caseInput{c.Input.OS, c.Input.Arch, c.Input.Artifact}
		}
	}
	t.Fatalf("no case %q in %s", name, releaseJSON)
	return caseInput{}
}
