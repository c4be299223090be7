// The gRPC transport of the session: a Dialer that opens Gateway.Session
// over the node's mTLS identity (identity.Dial: the pinned serving CA, the
// node certificate of the moment, or the dev gateway's h2c when allowed).
// Another transport (WebSocket, websocket.go) is another Dialer beside
// this one; Fallback (fallback.go) chains them.

package session

import (
	"context"
	"fmt"
	"time"

	"bcd/internal/config"
	"bcd/internal/identity"
	"bcd/internal/proto/agentv1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// DialOptions tune GRPCDialer.
type DialOptions struct {
	// AllowH2C permits dev_insecure_h2c (fakehw builds).
	AllowH2C bool
	// ConnectTimeout, when positive, makes a dial wait at most this long for
	// the connection to be ready before it opens the stream, and fail as
	// soon as the first attempt failed (what Fallback needs to move on);
	// 0 leaves it to grpc-go (the stream waits while the connection is
	// still being attempted).
	ConnectTimeout time.Duration
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
		if opts.ConnectTimeout > 0 {
			if err := awaitReady(ctx, conn, opts.ConnectTimeout); err != nil {
				conn.Close()
				return nil, nil, err
			}
		}
		stream, err := agentv1.NewGatewayClient(conn).Session(ctx)
		if err != nil {
			conn.Close()
			return nil, nil, err
		}
		return grpcStream{Gateway_SessionClient: stream, resumed: identity.DidResume(stream.Context())}, func() { conn.Close() }, nil
	}
}

// grpcStream is Gateway.Session's client stream, named, and whether its
// connection resumed a TLS session.
type grpcStream struct {
	agentv1.Gateway_SessionClient
	resumed bool
}

func (grpcStream) Transport() string { return "grpc" }

func (s grpcStream) Resumed() bool { return s.resumed }

// awaitReady connects conn and waits until it is ready; it fails when the
// first attempt fails (TRANSIENT_FAILURE) or after timeout.
func awaitReady(ctx context.Context, conn *grpc.ClientConn, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn.Connect()
	for {
		state := conn.GetState()
		switch state {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure, connectivity.Shutdown:
			return fmt.Errorf("the gateway is unreachable (%s)", state)
		}
		if !conn.WaitForStateChange(ctx, state) {
			return fmt.Errorf("the gateway is not ready after %s (%s)", timeout, state)
		}
	}
}
