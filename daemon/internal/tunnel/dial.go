// The tunnel's transport: a Dialer opens one Gateway.Tunnel stream;
// GRPCDialer is the gRPC one over the node's mTLS identity (identity.Dial,
// the same pinned TLS as the session), one client connection per tunnel.

package tunnel

import (
	"context"

	"bcd/internal/config"
	"bcd/internal/identity"
	"bcd/internal/proto/agentv1"
)

// Stream is the client side of Gateway.Tunnel.
type Stream interface {
	Send(*agentv1.TunnelFrame) error
	Recv() (*agentv1.TunnelFrame, error)
	CloseSend() error
}

// Dialer opens a Tunnel stream on ctx (cancelling ctx ends it); close
// releases its connection.
type Dialer func(ctx context.Context) (stream Stream, close func(), err error)

// GRPCDialer returns a Dialer of Gateway.Tunnel at c's gateway as the node
// of id.
func GRPCDialer(c *config.Config, id *identity.Identity, allowH2C bool) Dialer {
	return func(ctx context.Context) (Stream, func(), error) {
		conn, err := identity.Dial(c, identity.DialOptions{Identity: id, AllowH2C: allowH2C})
		if err != nil {
			return nil, nil, err
		}
		stream, err := agentv1.NewGatewayClient(conn).Tunnel(ctx)
		if err != nil {
			conn.Close()
			return nil, nil, err
		}
		return stream, func() { conn.Close() }, nil
	}
}
