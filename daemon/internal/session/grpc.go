// The gRPC transport of the session: a Dialer that opens Gateway.Session
// over the node's mTLS identity (identity.Dial: the pinned serving CA, the
// node certificate of the moment, or the dev gateway's h2c when allowed).
// Another transport (WebSocket) is another Dialer beside this one.

package session

import (
	"context"

	"bcd/internal/config"
	"bcd/internal/identity"
	"bcd/internal/proto/agentv1"
)

// DialOptions tune GRPCDialer.
type DialOptions struct {
	// AllowH2C permits dev_insecure_h2c (fakehw builds).
	AllowH2C bool
}

// GRPCDialer returns a Dialer of Gateway.Session at c's gateway as the node
// of id: one client connection per stream, closed with it. The certificate
// is read at each TLS handshake, so a renewal takes effect on the next dial.
func GRPCDialer(c *config.Config, id *identity.Identity, opts DialOptions) Dialer {
	return func(ctx context.Context) (Stream, func(), error) {
		conn, err := identity.Dial(c, identity.DialOptions{Identity: id, AllowH2C: opts.AllowH2C})
		if err != nil {
			return nil, nil, err
		}
		stream, err := agentv1.NewGatewayClient(conn).Session(ctx)
		if err != nil {
			conn.Close()
			return nil, nil, err
		}
		return stream, func() { conn.Close() }, nil
	}
}
