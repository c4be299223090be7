// Release manifests (docs/formats.md, "Releases"): JSON in a DSSE envelope signed by
// release keys, checked against bcd's [update] pins, the highest sequence
// installed and the time of the check. Checks, in the order of the Rust
// side's pki/src/release.rs: the signatures (dsse-bad-signature for a pinned
// key whose signature fails, release-threshold for too few pinned signers),
// the JSON (release-malformed), the sequence (release-sequence below the
// pinned minimum, release-rollback below the highest installed), the expiry
// (release-expired), the artifact for this platform
// (release-missing-artifact), then its size (release-size) and digest
// (release-digest).

package pki

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

// Manifest is a release manifest.
type Manifest struct {
	// Version is the daemon version.
	Version string `json:"version"`
	// Sequence orders releases; bcd refuses one below its lowest
	// acceptable, or below the highest it installed.
	Sequence uint64 `json:"sequence"`
	// ExpiresAtMs is when the manifest stops being good (Unix ms).
	ExpiresAtMs int64 `json:"expires_at_ms"`
	// Artifacts has one entry per platform.
	Artifacts []Artifact `json:"artifacts"`
}

// Artifact is one downloadable binary.
type Artifact struct {
	// OS is the operating system, "linux".
	OS string `json:"os"`
	// Arch is the architecture, "amd64" or "arm64".
	Arch string `json:"arch"`
	// SHA256 is the hex SHA-256 of the bytes.
	SHA256 string `json:"sha256"`
	// Size is the size in bytes.
	Size uint64 `json:"size"`
	// URL is where to download it.
	URL string `json:"url"`
}

// ReleasePolicy is bcd's [update] pins.
type ReleasePolicy struct {
	// Keys are the pinned release keys.
	Keys []*PublicKey
	// Threshold is how many of them must sign (at least 1).
	Threshold int
	// MinSequence is the lowest acceptable sequence.
	MinSequence uint64
	// InstalledSequence is the highest sequence installed (0: none yet);
	// a release below it is a rollback.
	InstalledSequence uint64
}

// VerifyManifest verifies a manifest's signatures, sequence and expiry at
// now, and returns it.
func VerifyManifest(env *Envelope, policy ReleasePolicy, now time.Time) (*Manifest, error) {
	threshold := max(policy.Threshold, 1)
	valid, err := env.verifyCount(PayloadTypeRelease, policy.Keys, threshold)
	if err != nil {
		return nil, quorumRefusal(err, CodeReleaseThreshold, "release signed by %d pinned key(s), %d required", valid, threshold)
	}
	manifest, err := parseManifest(env.Payload)
	if err != nil {
		return nil, refuseWith(CodeReleaseMalformed, err, "malformed release manifest")
	}
	if manifest.Sequence < policy.MinSequence {
		return nil, refuse(CodeReleaseSequence, "release sequence %d is below the lowest acceptable %d",
			manifest.Sequence, policy.MinSequence)
	}
	if manifest.Sequence < policy.InstalledSequence {
		return nil, refuse(CodeReleaseRollback, "release sequence %d is below the installed %d",
			manifest.Sequence, policy.InstalledSequence)
	}
	if nowMs := now.UnixMilli(); nowMs >= manifest.ExpiresAtMs {
		return nil, refuse(CodeReleaseExpired, "release manifest expired at %d, now is %d", manifest.ExpiresAtMs, nowMs)
	}
	return manifest, nil
}

// parseManifest reads the manifest JSON: every member required, no others.
func parseManifest(data []byte) (*Manifest, error) {
	obj, err := parseObject(data, true, "version", "sequence", "expires_at_ms", "artifacts")
	if err != nil {
		return nil, err
	}
	m := &Manifest{}
	var artifacts []json.RawMessage
	if err := obj.requiredAll(map[string]any{"version": &m.Version, "sequence": &m.Sequence, "expires_at_ms": &m.ExpiresAtMs, "artifacts": &artifacts}); err != nil {
		return nil, err
	}
	m.Artifacts = make([]Artifact, 0, len(artifacts))
	for _, raw := range artifacts {
		a := Artifact{}
		obj, err := parseObject(raw, true, "os", "arch", "sha256", "size", "url")
		if err != nil {
			return nil, err
		}
		if err := obj.requiredAll(map[string]any{"os": &a.OS, "arch": &a.Arch, "sha256": &a.SHA256, "size": &a.Size, "url": &a.URL}); err != nil {
			return nil, err
		}
		m.Artifacts = append(m.Artifacts, a)
	}
	return m, nil
}

// Artifact returns the manifest's artifact for a platform
// (release-missing-artifact when there is none).
func (m *Manifest) Artifact(os, arch string) (*Artifact, error) {
	for i := range m.Artifacts {
		if a := &m.Artifacts[i]; a.OS == os && a.Arch == arch {
			return a, nil
		}
	}
	return nil, refuse(CodeReleaseMissingArtifact, "no artifact for %s/%s", os, arch)
}

// Check checks downloaded bytes against the artifact entry: the size
// (release-size), then the SHA-256 (release-digest).
func (a *Artifact) Check(data []byte) error {
	if uint64(len(data)) != a.Size {
		return refuse(CodeReleaseSize, "artifact size %d, manifest says %d", len(data), a.Size)
	}
	sum := sha256.Sum256(data)
	if found := hex.EncodeToString(sum[:]); found != asciiLower(a.SHA256) {
		return refuse(CodeReleaseDigest, "artifact sha256 %s, manifest says %s", found, a.SHA256)
	}
	return nil
}

// VerifyRelease checks everything at once, at now: the manifest, the
// platform's artifact and its bytes.
func VerifyRelease(env *Envelope, policy ReleasePolicy, os, arch string, data []byte, now time.Time) (*Manifest, error) {
	manifest, err := VerifyManifest(env, policy, now)
	if err != nil {
		return nil, err
	}
	artifact, err := manifest.Artifact(os, arch)
	if err != nil {
		return nil, err
	}
	if err := artifact.Check(data); err != nil {
		return nil, err
	}
	return manifest, nil
}

// asciiLower lowercases ASCII letters only, as Rust's to_ascii_lowercase.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}
