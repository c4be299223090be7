// The agent's consoles (docs/protocol.md, "Tunnels"): a tunnel.Manager
// over the node's trust, journal and mTLS identity, its shells placed by
// the machine when it is a tunnel.Place (fakehw), and the frame handlers
// the agent hands the gateway frames it does not route itself: a feature
// that takes a new kind of frame is one more handler in that list.

package agent

import (
	"context"
	"os"

	"bcd/internal/proto/agentv1"
	"bcd/internal/tunnel"
)

// FrameHandler takes the gateway frames of one feature.
type FrameHandler interface {
	// Frame handles f and reports true when it is this feature's.
	Frame(f *agentv1.GatewayFrame) bool
}

// newTunnels is the agent's tunnel manager.
func (a *Agent) newTunnels() *tunnel.Manager {
	// The tunnel goes to the gateway the session is on, which asked for
	// it; a.session is made after the manager, and read at each dial.
	dial := func(ctx context.Context) (tunnel.Stream, func(), error) {
		c := a.opts.Config
		if u := a.sessionGateway(); u != "" {
			c = c.ForGateway(u)
		}
		return tunnel.GRPCDialer(c, a.id, a.opts.AllowH2C)(ctx)
	}
	if a.opts.NeverConnect {
		dial = func(context.Context) (tunnel.Stream, func(), error) { return nil, nil, ErrNeverConnects }
	}
	place, _ := a.opts.Machine.(tunnel.Place)
	return tunnel.New(tunnel.Config{
		NodeID:  a.id.NodeID,
		Trust:   a.trust,
		Journal: a.journal,
		Dial:    dial,
		Shell:   tunnel.ShellFor(os.Getenv, place),
		Log:     a.log,
	})
}
