// Signed intent (docs/formats.md, "Signed intent"): commands and NodeSpecs signed by a command
// root, trust bundles rotated by a quorum of the current approvers, and
// batch approvals for destructive commands, checked in the order of the Rust
// side's pki/src/intent.rs.
//
// Single-signer objects (commands, specs) keep the DSSE codes; quorum
// objects map "not enough valid signatures" (unknown signers included) to
// their own code (trust-quorum, batch-unapproved), while a signature by a
// trusted key that fails stays dsse-bad-signature.

package pki

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"time"

	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// SignedSpecs is bcd's policy for unsigned NodeSpecs.
type SignedSpecs int

const (
	// SignedSpecsAlways requires every spec to be signed (the default when bcd
	// has command roots).
	SignedSpecsAlways SignedSpecs = iota
	// SignedSpecsAccess requires a signature only on a spec that changes the
	// access section.
	SignedSpecsAccess
)

// String returns the policy's configuration name.
func (s SignedSpecs) String() string {
	switch s {
	case SignedSpecsAlways:
		return "always"
	case SignedSpecsAccess:
		return "access"
	}
	return fmt.Sprintf("SignedSpecs(%d)", int(s))
}

// ParseSignedSpecs parses "always" or "access".
func ParseSignedSpecs(s string) (SignedSpecs, error) {
	switch s {
	case "always":
		return SignedSpecsAlways, nil
	case "access":
		return SignedSpecsAccess, nil
	}
	return 0, fmt.Errorf("pki: signedSpecs %q is neither \"always\" nor \"access\"", s)
}

// VerifyCommand verifies a command: signed by one of roots (dsse-*), a
// Command (payload-malformed), for nodeID (command-wrong-node), not past
// its not_after at now (command-expired).
func VerifyCommand(env *Envelope, roots []*PublicKey, nodeID string, now time.Time) (*agentv1.Command, error) {
	payload, err := env.Verify(PayloadTypeCommand, roots, 1)
	if err != nil {
		return nil, err
	}
	command := &agentv1.Command{}
	if err := decodePayload(payload, command); err != nil {
		return nil, err
	}
	if command.GetNodeId() != nodeID {
		return nil, refuse(CodeCommandWrongNode, "command for node %q, this is %q", command.GetNodeId(), nodeID)
	}
	if nowMs := now.UnixMilli(); command.GetNotAfterMs() != 0 && nowMs > command.GetNotAfterMs() {
		return nil, refuse(CodeCommandExpired, "command expired at %d (now %d)", command.GetNotAfterMs(), nowMs)
	}
	return command, nil
}

// CommandDigest is what an approver signs for a command: the SHA-256 of its
// envelope's payload bytes.
func CommandDigest(env *Envelope) []byte {
	sum := sha256.Sum256(env.Payload)
	return sum[:]
}

// VerifySpec verifies a NodeSpec for nodeID under policy. Under
// SignedSpecsAccess an unsigned spec is taken unless its access section
// differs from appliedAccess, the section of the spec applied now (nil for
// none); any other spec must be signed by one of roots.
func VerifySpec(env *Envelope, roots []*PublicKey, nodeID string, policy SignedSpecs, appliedAccess *agentv1.AccessSection) (*agentv1.NodeSpec, error) {
	spec := &agentv1.NodeSpec{}
	if len(env.Signatures) == 0 && policy == SignedSpecsAccess {
		if env.PayloadType != PayloadTypeNodeSpec {
			return nil, refuse(CodeDSSEPayloadType, "payload type %q, expected %q", env.PayloadType, PayloadTypeNodeSpec)
		}
		if err := decodePayload(env.Payload, spec); err != nil {
			return nil, err
		}
		if !equalKnown(spec.GetAccess(), appliedAccess) {
			return nil, refuse(CodeSpecUnsignedAccess, "an unsigned spec may not change access")
		}
	} else {
		payload, err := env.Verify(PayloadTypeNodeSpec, roots, 1)
		if err != nil {
			return nil, err
		}
		if err := decodePayload(payload, spec); err != nil {
			return nil, err
		}
	}
	if spec.GetNodeId() != nodeID {
		return nil, refuse(CodeSpecWrongNode, "spec for node %q, this is %q", spec.GetNodeId(), nodeID)
	}
	return spec, nil
}

// ApproverKeys parses the approvers of a quorum (nil: none), refusing a key
// whose keyid is not its pin (bad-public-key).
func ApproverKeys(quorum *agentv1.Quorum) ([]*PublicKey, error) {
	keys := make([]*PublicKey, 0, len(quorum.GetApprovers()))
	for _, msg := range quorum.GetApprovers() {
		key, err := PublicKeyFromProto(msg)
		if err != nil {
			return nil, err
		}
		keys = append(keys, key)
	}
	return keys, nil
}

// CheckQuorum refuses a bundle whose own quorum cannot be met: threshold 0
// or above its number of approvers (trust-invalid), or an approver whose key
// does not parse (bad-public-key): a key that cannot verify cannot approve.
func CheckQuorum(bundle *agentv1.TrustBundle) error {
	threshold, approvers := bundle.GetQuorum().GetThreshold(), len(bundle.GetQuorum().GetApprovers())
	if threshold == 0 || int(threshold) > approvers {
		return refuse(CodeTrustInvalid, "invalid quorum: threshold %d of %d approver(s)", threshold, approvers)
	}
	_, err := ApproverKeys(bundle.GetQuorum())
	return err
}

// CheckBundleKeys refuses a bundle any of whose other keys does not parse
// (bad-public-key): its command roots, and its tunnels and workload
// issuers when it names them.
func CheckBundleKeys(bundle *agentv1.TrustBundle) error {
	keys := append([]*agentv1.PublicKey(nil), bundle.GetCommandRoots()...)
	for _, issuer := range []*agentv1.PublicKey{bundle.GetTunnelsIssuer(), bundle.GetWorkloadIssuer()} {
		if issuer != nil {
			keys = append(keys, issuer)
		}
	}
	for _, msg := range keys {
		if _, err := PublicKeyFromProto(msg); err != nil {
			return err
		}
	}
	return nil
}

// AcceptTrustBundle decides whether to take the trust bundle in env over
// current. It must be signed by at least threshold of the current approvers
// (trust-quorum; dsse-bad-signature for a current approver's signature that
// fails), decode (payload-malformed), be for the same trust domain
// (trust-domain), not roll the sequence back (trust-rollback; the same
// sequence only for the same bundle, a re-delivery), have a quorum that
// can be met (trust-invalid), and hold only keys that parse
// (bad-public-key: approvers, command roots, issuers).
func AcceptTrustBundle(current *agentv1.TrustBundle, env *Envelope) (*agentv1.TrustBundle, error) {
	approvers, err := ApproverKeys(current.GetQuorum())
	if err != nil {
		return nil, err
	}
	threshold := max(int(current.GetQuorum().GetThreshold()), 1)
	valid, err := env.verifyCount(PayloadTypeTrustBundle, approvers, threshold)
	if err != nil {
		return nil, quorumRefusal(err, CodeTrustQuorum, "trust bundle signed by %d current approver(s), %d required", valid, threshold)
	}
	next := &agentv1.TrustBundle{}
	if err := decodePayload(env.Payload, next); err != nil {
		return nil, err
	}
	if next.GetTrustDomain() != current.GetTrustDomain() {
		return nil, refuse(CodeTrustDomain, "trust bundle for %q, this is %q", next.GetTrustDomain(), current.GetTrustDomain())
	}
	if next.GetSequence() < current.GetSequence() ||
		(next.GetSequence() == current.GetSequence() && !equalKnown(next, current)) {
		return nil, refuse(CodeTrustRollback, "trust bundle sequence %d is below the current %d, or the same with other content",
			next.GetSequence(), current.GetSequence())
	}
	if err := CheckQuorum(next); err != nil {
		return nil, err
	}
	if err := CheckBundleKeys(next); err != nil {
		return nil, err
	}
	return next, nil
}

// quorumRefusal maps the DSSE refusals "unsigned", "unknown key" and
// "threshold" to a quorum object's own code; others pass through.
func quorumRefusal(err error, code Code, format string, valid, threshold int) error {
	switch CodeOf(err) {
	case CodeDSSEUnsigned, CodeDSSEUnknownKey, CodeDSSEThreshold:
		return refuse(code, format, valid, threshold)
	}
	return err
}

// BatchThreshold returns the approvals a batch of size commands needs: the
// highest threshold among the tiers it reaches and the quorum's own, at
// least 1.
func BatchThreshold(quorum *agentv1.Quorum, size int) int {
	threshold := quorum.GetThreshold()
	for _, tier := range quorum.GetTiers() {
		if size >= int(tier.GetMinCommands()) && tier.GetThreshold() > threshold {
			threshold = tier.GetThreshold()
		}
	}
	return max(int(threshold), 1)
}

// VerifyBatchApproval verifies that command, whose envelope commandEnv was
// already verified, is approved by approval under quorum of trustDomain at
// now: enough approver signatures for the batch's size (batch-unapproved;
// dsse-bad-signature for an approver's signature that fails), a
// BatchApproval (payload-malformed), for the command's batch and this trust
// domain (batch-mismatch), naming the command's digest
// (batch-command-missing), not expired (batch-expired).
func VerifyBatchApproval(approval *Envelope, quorum *agentv1.Quorum, trustDomain string, commandEnv *Envelope, command *agentv1.Command, now time.Time) (*agentv1.BatchApproval, error) {
	approvers, err := ApproverKeys(quorum)
	if err != nil {
		return nil, err
	}
	// The threshold depends on the batch size, which is inside the payload:
	// decode first to size it, then verify the signatures before trusting it.
	size := 1
	unverified := &agentv1.BatchApproval{}
	if proto.Unmarshal(approval.Payload, unverified) == nil {
		size = len(unverified.GetCommandDigests())
	}
	threshold := BatchThreshold(quorum, size)
	valid, err := approval.verifyCount(PayloadTypeBatchApproval, approvers, threshold)
	if err != nil {
		return nil, quorumRefusal(err, CodeBatchUnapproved, "batch approved by %d approver(s), %d required", valid, threshold)
	}
	batch := &agentv1.BatchApproval{}
	if err := decodePayload(approval.Payload, batch); err != nil {
		return nil, err
	}
	if batch.GetBatchId() != command.GetBatch() || batch.GetTrustDomain() != trustDomain {
		return nil, refuse(CodeBatchMismatch, "approval for batch %q, expected %q",
			batch.GetBatchId()+"@"+batch.GetTrustDomain(), command.GetBatch()+"@"+trustDomain)
	}
	digest := CommandDigest(commandEnv)
	found := false
	for _, d := range batch.GetCommandDigests() {
		if bytes.Equal(d, digest) {
			found = true
			break
		}
	}
	if !found {
		return nil, refuse(CodeBatchCommandMissing, "command %s is not in the approved batch", command.GetId())
	}
	if nowMs := now.UnixMilli(); batch.GetNotAfterMs() != 0 && nowMs > batch.GetNotAfterMs() {
		return nil, refuse(CodeBatchExpired, "batch approval expired at %d (now %d)", batch.GetNotAfterMs(), nowMs)
	}
	return batch, nil
}

// equalKnown compares two messages by their known fields only, ignoring
// unknown fields at every depth, as the Rust side's decoded structs compare.
// Two nil messages are equal; a nil and a non-nil one are not.
func equalKnown[M proto.Message](a, b M) bool {
	av, bv := a.ProtoReflect(), b.ProtoReflect()
	if !av.IsValid() || !bv.IsValid() {
		return av.IsValid() == bv.IsValid()
	}
	return proto.Equal(withoutUnknown(a), withoutUnknown(b))
}

// withoutUnknown returns a copy of m with unknown fields cleared at every depth.
func withoutUnknown(m proto.Message) proto.Message {
	c := proto.Clone(m)
	clearUnknown(c.ProtoReflect())
	return c
}

func clearUnknown(m protoreflect.Message) {
	m.SetUnknown(nil)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			list := v.List()
			for i := 0; i < list.Len(); i++ {
				clearUnknown(list.Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				clearUnknown(mv.Message())
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			clearUnknown(v.Message())
		}
		return true
	})
}
