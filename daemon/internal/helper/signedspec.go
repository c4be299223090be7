// A request's signed NodeSpec for this host, what host.apply and
// access.apply share: the DSSE envelope verified under root's command
// roots, its payload decoded, and its node this host's (root's [helper]
// node_id, else the node the first signed apply bound, else the node the
// bcd user's config.toml names, which that apply then binds: see the
// package comment). An apply binds the node once it succeeded.

package helper

import (
	"encoding/json"
	"os"

	"bcd/internal/config"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
)

// signedSpec verifies and decodes the request's spec, and checks that it
// is this host's node's; it returns the spec, the host state read and the
// node id.
func (s *Server) signedSpec(req Request) (*agentv1.NodeSpec, hostState, string, error) {
	var a hostArgs
	if err := decode(req, &a); err != nil {
		return nil, hostState{}, "", err
	}
	if len(s.roots) == 0 {
		return nil, hostState{}, "", refuse(CodeNoRoots, "no command root in %s", s.cfg.Helper.CommandRootsDir)
	}
	env, err := pki.ParseEnvelopeJSON(a.Spec)
	if err != nil {
		return nil, hostState{}, "", err
	}
	payload, err := env.Verify(pki.PayloadTypeNodeSpec, s.roots, 1)
	if err != nil {
		return nil, hostState{}, "", err
	}
	spec := &agentv1.NodeSpec{}
	if err := proto.Unmarshal(payload, spec); err != nil {
		return nil, hostState{}, "", refuse(CodeArgs, "the spec does not decode: %v", err)
	}
	state, err := s.loadHostState()
	if err != nil {
		return nil, hostState{}, "", err
	}
	nodeID, err := s.hostNodeID(state)
	if err != nil {
		return nil, hostState{}, "", err
	}
	if spec.GetNodeId() != nodeID {
		return nil, hostState{}, "", refuse(pki.CodeSpecWrongNode, "spec for node %q, this host is %q", spec.GetNodeId(), nodeID)
	}
	return spec, state, nodeID, nil
}

// bindNode records nodeID as this host's node after its first signed
// apply, unless root's configuration names it or an apply bound it before:
// from then on the bcd user's config.toml is never taken for it.
func (s *Server) bindNode(state hostState, nodeID string) error {
	if state.NodeID != "" || s.cfg.Helper.NodeID != "" {
		return nil
	}
	state.NodeID = nodeID
	if err := os.MkdirAll(s.cfg.Helper.StateDir, 0o755); err != nil {
		return err
	}
	data, _ := json.Marshal(state)
	if err := config.WriteFileAtomic(s.hostStatePath(), data, 0o644); err != nil {
		return err
	}
	s.log.Info("host.node_bound", "node_id", nodeID, "state", s.hostStatePath())
	return nil
}
