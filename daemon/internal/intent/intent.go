// Package intent holds what bcd trusts for signed intent (docs/formats.md, "Signed intent"):
// the command roots and the trust bundle from the verified JoinResponse,
// replaced only by a rotation signed by the current approvers (persisted in
// the journal; anything else is ignored and logged trust.ignored), and the
// signedSpecs policy.
package intent

import (
	"fmt"
	"log/slog"
	"sync"

	"bcd/internal/journal"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
)

// stateKey is where a rotated trust bundle is kept in the journal.
const stateKey = "trust_bundle"

// Trust is the node's current trust.
type Trust struct {
	mu          sync.RWMutex
	roots       []*pki.PublicKey
	bundle      *agentv1.TrustBundle
	trustDomain string
	policy      pki.SignedSpecs
	journal     *journal.Journal
	log         *slog.Logger
}

// New starts from the JoinResponse's roots and bundle, or from a later
// rotation kept in the journal. signedSpecs is the configured policy ("" for
// the default: always).
func New(j *journal.Journal, roots []*pki.PublicKey, bundle *agentv1.TrustBundle, trustDomain, signedSpecs string, log *slog.Logger) (*Trust, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Trust{roots: roots, bundle: bundle, trustDomain: trustDomain, journal: j, log: log}
	if signedSpecs != "" {
		p, err := pki.ParseSignedSpecs(signedSpecs)
		if err != nil {
			return nil, err
		}
		t.policy = p
	}
	if bundle != nil && bundle.GetTrustDomain() != "" {
		t.trustDomain = bundle.GetTrustDomain()
	}
	if j != nil {
		t.restore(j.Get(stateKey), bundle)
	}
	return t, nil
}

// restore takes the rotated bundle kept in the journal, when it is not
// older than the JoinResponse's. One that does not decode or whose keys do
// not parse (a journal written before every key was checked) is logged
// trust.ignored and dropped: the node starts on the JoinResponse's trust
// instead of not starting at all.
func (t *Trust) restore(data []byte, joined *agentv1.TrustBundle) {
	if data == nil {
		return
	}
	stored := &agentv1.TrustBundle{}
	err := proto.Unmarshal(data, stored)
	if err == nil {
		err = CheckStored(stored)
	}
	if err == nil && joined != nil && stored.GetSequence() < joined.GetSequence() {
		return
	}
	if err == nil {
		err = t.take(stored)
	}
	if err != nil {
		t.log.Warn("trust.ignored", "code", string(pki.CodeOf(err)), "reason", "the journal's trust bundle: "+err.Error())
		if perr := t.journal.Put(stateKey, nil); perr != nil {
			t.log.Error("trust.persist_failed", "err", perr)
		}
	}
}

// CheckStored checks a bundle's keys as a rotation would (the quorum and
// every key).
func CheckStored(b *agentv1.TrustBundle) error {
	if err := pki.CheckQuorum(b); err != nil {
		return err
	}
	return pki.CheckBundleKeys(b)
}

func (t *Trust) take(b *agentv1.TrustBundle) error {
	var roots []*pki.PublicKey
	for _, msg := range b.GetCommandRoots() {
		k, err := pki.PublicKeyFromProto(msg)
		if err != nil {
			return fmt.Errorf("a command root of trust bundle %d: %w", b.GetSequence(), err)
		}
		roots = append(roots, k)
	}
	t.bundle, t.roots = b, roots
	return nil
}

// Roots are the command roots (none: commands and specs are not signed).
func (t *Trust) Roots() []*pki.PublicKey {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.roots
}

// Quorum is the current bundle's quorum (nil without a bundle) and the
// trust domain.
func (t *Trust) Quorum() (*agentv1.Quorum, string) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.bundle == nil {
		return nil, t.trustDomain
	}
	return t.bundle.GetQuorum(), t.trustDomain
}

// Bundle is the current trust bundle (nil without one).
func (t *Trust) Bundle() *agentv1.TrustBundle {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.bundle
}

// Policy is the signedSpecs policy.
func (t *Trust) Policy() pki.SignedSpecs { return t.policy }

// Rotate takes the bundle in env when the current approvers signed it
// (pki.AcceptTrustBundle) and persists it; otherwise it logs trust.ignored
// and keeps the current trust. It reports whether the bundle was taken.
func (t *Trust) Rotate(env *agentv1.Envelope) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.bundle == nil {
		t.log.Warn("trust.ignored", "code", pki.CodeTrustQuorum, "reason", "no current trust bundle, so no approvers")
		return false
	}
	next, err := pki.AcceptTrustBundle(t.bundle, pki.EnvelopeFromProto(env))
	if err != nil {
		t.log.Warn("trust.ignored", "code", string(pki.CodeOf(err)), "reason", err.Error(), "current_sequence", t.bundle.GetSequence())
		return false
	}
	if proto.Equal(next, t.bundle) {
		return false
	}
	// Parse first, persist second: a bundle is kept only once it is usable,
	// so a restart never meets one it cannot take.
	previous, previousRoots := t.bundle, t.roots
	if err := t.take(next); err != nil {
		t.log.Warn("trust.ignored", "code", string(pki.CodeOf(err)), "reason", err.Error())
		return false
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(next)
	if err == nil && t.journal != nil {
		err = t.journal.Put(stateKey, data)
	}
	if err != nil {
		t.bundle, t.roots = previous, previousRoots
		t.log.Error("trust.persist_failed", "err", err)
		return false
	}
	t.log.Info("trust.rotated", "sequence", next.GetSequence(), "command_roots", len(t.roots),
		"approvers", len(next.GetQuorum().GetApprovers()), "threshold", next.GetQuorum().GetThreshold())
	return true
}
