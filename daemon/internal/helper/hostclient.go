// The node's side of host units: HostUnits is a hostconfig.System over
// bcd helper's socket (host.apply with the signed NodeSpec envelope as
// the converge core received it, host.start of one unit), so the host
// build reconciles the host section through the root helper.

package helper

import (
	"context"
	"encoding/json"
	"errors"

	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
)

// HostUnits installs and starts host units through the helper at Socket.
type HostUnits struct {
	// Socket is the helper's socket.
	Socket string
}

// errNoEnvelope is Install without the signed spec the helper verifies.
var errNoEnvelope = errors.New("host.apply needs the signed NodeSpec envelope, and there is none")

// Install sends envelope to host.apply, which verifies it again and
// writes its units (the units argument is the same units, already read
// by the reconciler; the helper takes them from the signed payload only).
func (h *HostUnits) Install(ctx context.Context, envelope *agentv1.Envelope, _ []*agentv1.HostUnit) error {
	if envelope == nil {
		return errNoEnvelope
	}
	raw := json.RawMessage(pki.EnvelopeFromProto(envelope).JSON())
	return Call(ctx, h.Socket, OpHostApply, map[string]json.RawMessage{"spec": raw}, &HostResult{})
}

// Start asks host.start to start the unit; a refusal's text is the reason.
func (h *HostUnits) Start(ctx context.Context, name string) error {
	return Call(ctx, h.Socket, OpHostStart, HostStartArgs{Name: name}, nil)
}
