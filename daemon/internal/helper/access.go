// The access section on a host (docs/daemon.md, "bcd helper"): an
// unprivileged bcd cannot write sshd's files, so access.apply takes the
// NodeSpec envelope as host.apply does (signed by a command root of the
// helper's, for this host's node, a generation not below the last one it
// applied: access-generation in state_dir/access.json) and writes the
// section's files under [helper] access_root with daemon/internal/access
// (its checks first: a section it refuses is helper-args). The node's side
// is HostUnits.AccessWriter.

package helper

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"bcd/internal/access"
	"bcd/internal/config"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
)

// AccessResult is access.apply's result.
type AccessResult struct {
	Generation uint64   `json:"generation"`
	Accounts   []string `json:"accounts"`
}

// accessState is <state_dir>/access.json.
type accessState struct {
	Generation uint64 `json:"generation"`
}

func (s *Server) accessApply(req Request) (any, error) {
	spec, hostState, nodeID, err := s.signedSpec(req)
	if err != nil {
		return nil, err
	}
	statePath := filepath.Join(s.cfg.Helper.StateDir, "access.json")
	var state accessState
	data, err := os.ReadFile(statePath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, err
	case json.Unmarshal(data, &state) != nil:
		return nil, refuse(CodeArgs, "%s does not read", statePath)
	}
	if spec.GetGeneration() < state.Generation {
		return nil, refuse(CodeGeneration, "generation %d is below the applied %d", spec.GetGeneration(), state.Generation)
	}
	files, err := access.Plan(spec.GetAccess(), spec.GetGeneration())
	if err != nil {
		return nil, refuse(CodeArgs, "the access section: %v", err)
	}
	if err := (access.DirWriter{Root: s.cfg.Helper.AccessRoot}).Write(context.Background(), nil, files); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.cfg.Helper.StateDir, 0o755); err != nil {
		return nil, err
	}
	data, _ = json.Marshal(accessState{Generation: spec.GetGeneration()})
	if err := config.WriteFileAtomic(statePath, data, 0o644); err != nil {
		return nil, err
	}
	if err := s.bindNode(hostState, nodeID); err != nil {
		return nil, err
	}
	s.log.Info("access.applied", "generation", spec.GetGeneration(), "accounts", files.Accounts)
	return &AccessResult{Generation: spec.GetGeneration(), Accounts: append([]string{}, files.Accounts...)}, nil
}

// AccessWriter writes the access section through access.apply.
func (h *HostUnits) AccessWriter() access.Writer { return accessClient{socket: h.Socket} }

// accessClient is the node's side of access.apply.
type accessClient struct{ socket string }

// Write sends the signed spec; the helper plans and writes it itself. An
// unsigned spec reaches it only with the access section the last signed
// one had (signedSpecs = "access": the converge core refused any other),
// which the helper wrote then: there is nothing to do.
func (c accessClient) Write(ctx context.Context, envelope *agentv1.Envelope, _ *access.Files) error {
	if envelope == nil {
		return errNoEnvelope
	}
	if len(envelope.GetSignatures()) == 0 {
		return nil
	}
	raw := json.RawMessage(pki.EnvelopeFromProto(envelope).JSON())
	return Call(ctx, c.socket, OpAccessApply, map[string]json.RawMessage{"spec": raw}, &AccessResult{})
}
