// The release family: signed release manifests (release), the cases of
// testdata/release/release.json.
// The Go twin of fixtures/src/release.rs's verifiers.

package interop

import (
	"time"

	"bcd/internal/pki"
)

// releaseFamily is the release family's verifier of each kind.
var releaseFamily = family{
	name: "release",
	kinds: map[string]verifier{
		"release": runRelease,
	},
}

func runRelease(in *input) (Outcome, error) {
	policy := pki.ReleasePolicy{Keys: in.publics("keys"), Threshold: int(in.int("threshold")), MinSequence: uint64(in.int("minSequence")),
		InstalledSequence: uint64(in.int("installedSequence"))}
	os, arch, artifact, text := in.string("os"), in.string("arch"), in.bytes("artifact"), in.string("envelope")
	at := in.int("at")
	if in.err != nil {
		return Outcome{}, in.err
	}
	manifest, err := withEnvelope(text, func(env *pki.Envelope) (*pki.Manifest, error) {
		return pki.VerifyRelease(env, policy, os, arch, artifact, time.UnixMilli(at))
	})
	return result(manifest, err, func(m *pki.Manifest) map[string]any {
		return map[string]any{"version": m.Version, "sequence": m.Sequence}
	})
}
