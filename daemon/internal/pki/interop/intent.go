// The intent family, what the control plane signs for a node: commands
// (command), NodeSpecs (node-spec), trust-bundle rotations (trust-bundle)
// and batch approvals (batch-approval).
// The Go twin of fixtures/src/interop/cases/intent.rs's verifiers.

package interop

import (
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
)

// intentFamily is the intent family's verifier of each kind.
var intentFamily = family{
	name: "intent",
	kinds: map[string]verifier{
		"command":        runCommand,
		"node-spec":      runNodeSpec,
		"trust-bundle":   runTrustBundle,
		"batch-approval": runBatchApproval,
	},
}

func runCommand(in *input) (Outcome, error) {
	roots, node, at, text := in.publics("roots"), in.string("nodeId"), in.time("at"), in.string("envelope")
	if in.err != nil {
		return Outcome{}, in.err
	}
	command, err := withEnvelope(text, func(env *pki.Envelope) (*agentv1.Command, error) {
		return pki.VerifyCommand(env, roots, node, at)
	})
	return result(command, err, func(c *agentv1.Command) map[string]any { return map[string]any{"command": DescribeCommand(c)} })
}

func runNodeSpec(in *input) (Outcome, error) {
	roots, node, text := in.publics("roots"), in.string("nodeId"), in.string("envelope")
	policy, err := pki.ParseSignedSpecs(in.string("signedSpecs"))
	if err != nil {
		in.fail("%v", err)
	}
	var applied *agentv1.AccessSection
	if !in.has("appliedAccess") {
		in.fail("missing input.appliedAccess")
	} else if !in.isNull("appliedAccess") {
		applied = &agentv1.AccessSection{}
		in.message("appliedAccess", applied)
	}
	if in.err != nil {
		return Outcome{}, in.err
	}
	spec, err := withEnvelope(text, func(env *pki.Envelope) (*agentv1.NodeSpec, error) {
		return pki.VerifySpec(env, roots, node, policy, applied)
	})
	return result(spec, err, DescribeSpec)
}

// DescribeSpec is what a node-spec case reports of an accepted spec: its
// node, its generation and its daemon section (the release, and its
// manifest's payload type and signatures as carried).
func DescribeSpec(s *agentv1.NodeSpec) map[string]any {
	var daemon any
	if d := s.GetDaemon(); d != nil {
		daemon = map[string]any{"version": d.GetVersion(), "sequence": d.GetSequence(),
			"manifestPayloadType": d.GetManifest().GetPayloadType(), "manifestSignatures": len(d.GetManifest().GetSignatures())}
	}
	return map[string]any{"nodeId": s.GetNodeId(), "generation": s.GetGeneration(), "daemon": daemon}
}

func runTrustBundle(in *input) (Outcome, error) {
	current, text := &agentv1.TrustBundle{}, in.string("envelope")
	in.message("current", current)
	if in.err != nil {
		return Outcome{}, in.err
	}
	bundle, err := withEnvelope(text, func(env *pki.Envelope) (*agentv1.TrustBundle, error) {
		return pki.AcceptTrustBundle(current, env)
	})
	return result(bundle, err, DescribeTrustBundle)
}

func runBatchApproval(in *input) (Outcome, error) {
	quorum, domain, at, text := &agentv1.Quorum{}, in.string("trustDomain"), in.time("at"), in.string("approval")
	in.message("quorum", quorum)
	// The command is the input of the check, not under test: a broken one is
	// a broken case.
	commandEnv, err := pki.ParseEnvelopeJSON([]byte(in.string("command")))
	command := &agentv1.Command{}
	if err == nil {
		err = proto.Unmarshal(commandEnv.Payload, command)
	}
	if err != nil {
		in.fail("input.command: %v", err)
	}
	if in.err != nil {
		return Outcome{}, in.err
	}
	batch, err := withEnvelope(text, func(env *pki.Envelope) (*agentv1.BatchApproval, error) {
		return pki.VerifyBatchApproval(env, quorum, domain, commandEnv, command, at)
	})
	return result(batch, err, func(b *agentv1.BatchApproval) map[string]any { return map[string]any{"batchId": b.GetBatchId()} })
}
