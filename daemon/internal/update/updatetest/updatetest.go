// Package updatetest is test support, imported only by tests: it loads
// testdata/release/release.json (made by `cargo xtask daemon-fixtures`):
// the two release keys with their test-only private keys (Ed25519 PKCS#8),
// the threshold and lowest sequence, the signed manifest of 0.9.0 at
// sequence 7, its artifact and the release cases, and it signs manifests
// with those keys. It does not import bcd/internal/update, whose own tests
// use it.
package updatetest

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"os"
	"testing"

	"bcd/internal/pki"
	"bcd/internal/testrepo"
)

// Key is a release key of the fixture.
type Key struct {
	Label string
	// SPKI is the base64 DER SubjectPublicKeyInfo, as [update] release_keys takes it.
	SPKI string
	// Pin is "sha256:…", as [update] release_key_pins takes it.
	Pin    string
	Public *pki.PublicKey
	// Signer is the test-only private key.
	Signer crypto.Signer
}

// Case is a release case: a manifest and what it is checked against.
type Case struct {
	Name string
	// Envelope is the DSSE JSON envelope of the manifest.
	Envelope string
	OS, Arch string
	Artifact []byte
	// Error is the code of the refusal; "" where the release verifies.
	Error string
}

// Release is testdata/release/release.json.
type Release struct {
	Path        string
	Keys        []Key
	Threshold   int
	MinSequence uint64
	// Manifest is the DSSE JSON envelope of the good manifest: 0.9.0 at
	// sequence 7, signed by both keys, for linux/amd64 with Artifact.
	Manifest string
	Artifact []byte
	Cases    []Case
}

// Load loads the release fixture of the repository's testdata/, found from
// the test's working directory upwards.
func Load(t testing.TB) *Release {
	t.Helper()
	return LoadFile(t, testrepo.Path(t, "release", "release.json"))
}

// LoadFile loads the release fixture at path.
func LoadFile(t testing.TB, path string) *Release {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Keys []struct {
			Label        string `json:"label"`
			SPKI         string `json:"spki"`
			Pin          string `json:"pin"`
			PrivatePkcs8 string `json:"privatePkcs8"`
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
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	r := &Release{Path: path, Threshold: f.Threshold, MinSequence: f.MinSequence, Manifest: f.Manifest, Artifact: f.Artifact}
	for _, k := range f.Keys {
		der, err := base64.StdEncoding.DecodeString(k.SPKI)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, k.Label, err)
		}
		pub, err := pki.ParsePublicKey(der)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, k.Label, err)
		}
		der, err = base64.StdEncoding.DecodeString(k.PrivatePkcs8)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, k.Label, err)
		}
		key, err := x509.ParsePKCS8PrivateKey(der)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, k.Label, err)
		}
		r.Keys = append(r.Keys, Key{Label: k.Label, SPKI: k.SPKI, Pin: k.Pin, Public: pub, Signer: key.(ed25519.PrivateKey)})
	}
	for _, c := range f.Cases {
		r.Cases = append(r.Cases, Case{Name: c.Name, Envelope: c.Input.Envelope, OS: c.Input.OS, Arch: c.Input.Arch,
			Artifact: c.Input.Artifact, Error: c.Error})
	}
	return r
}

// SPKIs are the keys' base64 SubjectPublicKeyInfos.
func (r *Release) SPKIs() []string {
	var out []string
	for _, k := range r.Keys {
		out = append(out, k.SPKI)
	}
	return out
}

// Pins are the keys' pins.
func (r *Release) Pins() []string {
	var out []string
	for _, k := range r.Keys {
		out = append(out, k.Pin)
	}
	return out
}

// PublicKeys are the keys.
func (r *Release) PublicKeys() []*pki.PublicKey {
	var out []*pki.PublicKey
	for _, k := range r.Keys {
		out = append(out, k.Public)
	}
	return out
}

// Signers are the keys' private keys.
func (r *Release) Signers() []crypto.Signer {
	var out []crypto.Signer
	for _, k := range r.Keys {
		out = append(out, k.Signer)
	}
	return out
}

// Envelope is the good manifest, parsed anew on every call.
func (r *Release) Envelope(t testing.TB) *pki.Envelope {
	t.Helper()
	return parse(t, r.Manifest)
}

// Case is the case named name.
func (r *Release) Case(t testing.TB, name string) Case {
	t.Helper()
	for _, c := range r.Cases {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no case %q in %s", name, r.Path)
	return Case{}
}

// CaseEnvelope is the manifest of the case named name, parsed.
func (r *Release) CaseEnvelope(t testing.TB, name string) *pki.Envelope {
	t.Helper()
	return parse(t, r.Case(t, name).Envelope)
}

// Sign signs m with every key.
func (r *Release) Sign(t testing.TB, m pki.Manifest) *pki.Envelope {
	t.Helper()
	return r.SignWith(t, m, len(r.Keys))
}

// Expires is the expiry SignWith gives a manifest that names none: the
// fixture's, 2100-01-01 (fixtures/src/release.rs, EXPIRES_AT_MS).
const Expires int64 = 4_102_444_800_000

// SignWith signs m with the first n keys (a manifest without ExpiresAtMs
// gets Expires).
func (r *Release) SignWith(t testing.TB, m pki.Manifest, n int) *pki.Envelope {
	t.Helper()
	if m.ExpiresAtMs == 0 {
		m.ExpiresAtMs = Expires
	}
	payload, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	env, err := pki.SignEnvelope(rand.Reader, pki.PayloadTypeRelease, payload, r.Signers()[:n]...)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func parse(t testing.TB, text string) *pki.Envelope {
	t.Helper()
	env, err := pki.ParseEnvelopeJSON([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return env
}
