// Tests of signed intent beyond the fixtures: tiers, and re-deliveries that
// carry fields this build does not know.

package pki

import (
	"crypto"
	"errors"
	"testing"

	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func TestTiersRaiseTheBatchThreshold(t *testing.T) {
	q := &agentv1.Quorum{Threshold: 1, Tiers: []*agentv1.QuorumTier{{MinCommands: 10, Threshold: 3}}}
	if BatchThreshold(q, 2) != 1 || BatchThreshold(q, 10) != 3 || BatchThreshold(&agentv1.Quorum{}, 1) != 1 {
		t.Fatal("wrong thresholds")
	}
}

func TestTrustRotationNeedsTheCurrentQuorum(t *testing.T) {
	a, b, c := DeriveEd25519("s", "a"), DeriveEd25519("s", "b"), DeriveEd25519("s", "c")
	bundle := func(seq uint64, threshold uint32, approvers ...crypto.Signer) *agentv1.TrustBundle {
		q := &agentv1.Quorum{Threshold: threshold}
		for _, s := range approvers {
			k, _ := PublicKeyOf(s)
			q.Approvers = append(q.Approvers, k.Proto())
		}
		return &agentv1.TrustBundle{TrustDomain: "td", Sequence: seq, Quorum: q}
	}
	sign := func(payload []byte, signers ...crypto.Signer) *Envelope {
		env, err := SignEnvelope(nil, PayloadTypeTrustBundle, payload, signers...)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	marshal := func(m proto.Message) []byte { b, _ := proto.Marshal(m); return b }
	current := bundle(1, 2, a, b)
	next := bundle(2, 2, b, c)
	if _, err := AcceptTrustBundle(current, sign(marshal(next), a, b)); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		env  *Envelope
		want Code
	}{
		"one approver":        {sign(marshal(next), a), CodeTrustQuorum},
		"next approvers":      {sign(marshal(next), b, c), CodeTrustQuorum},
		"rollback":            {sign(marshal(bundle(0, 2, a, b)), a, b), CodeTrustRollback},
		"unmeetable":          {sign(marshal(bundle(3, 2, a)), a, b), CodeTrustInvalid},
		"same sequence, more": {sign(marshal(bundle(1, 1, a, b)), a, b), CodeTrustRollback},
		// A re-delivery with a field this build does not know is the same
		// bundle, as it is for the Rust side's decoded structs.
		"re-delivery with an unknown field": {sign(protowire.AppendString(protowire.AppendTag(marshal(current), 99, protowire.BytesType), "new"), a, b), ""},
	} {
		if _, err := AcceptTrustBundle(current, tc.env); CodeOf(err) != tc.want {
			t.Errorf("%s: got %v, want %q", name, err, tc.want)
		}
	}
	broken := bundle(1, 2, a, b)
	broken.Quorum.Approvers[0].Keyid = "sha256:x"
	if _, err := AcceptTrustBundle(broken, sign(marshal(next), a, b)); !errors.Is(err, CodeBadPublicKey) {
		t.Fatalf("a current approver whose keyid is not its pin: %v", err)
	}
}
