// Dialing the gateway with grpc-go: TLS 1.3 with the serving-CA pin, the
// node's client certificate when it has one (resuming the identity's TLS
// session when it has one, sessions.go), or cleartext HTTP/2 when the
// configuration asks for it and the build allows it (fakehw only), with
// the node id in the x-bc-test-node header as the dev gateway expects.

package identity

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"bcd/internal/config"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// ErrInsecureH2C means dev_insecure_h2c is set in a build without fakehw.
var ErrInsecureH2C = errors.New("dev_insecure_h2c is only honoured by fakehw builds")

// DialOptions say how to reach the gateway.
type DialOptions struct {
	// Identity presents the node certificate (nil for Join).
	Identity *Identity
	// AllowH2C permits dev_insecure_h2c (fakehw builds).
	AllowH2C bool
}

// Target returns grpc-go's target for a gateway URL (host:port).
func Target(gatewayURL string) (string, error) {
	u, err := url.Parse(gatewayURL)
	if err != nil {
		return "", fmt.Errorf("gateway_url %q: %w", gatewayURL, err)
	}
	if u.Host == "" {
		return "", fmt.Errorf("gateway_url %q has no host", gatewayURL)
	}
	host := u.Host
	if u.Port() == "" {
		host += ":443"
	}
	return "passthrough:///" + host, nil
}

// Dial returns a client connection to the gateway (connected lazily).
func Dial(c *config.Config, opts DialOptions) (*grpc.ClientConn, error) {
	target, err := Target(c.GatewayURL)
	if err != nil {
		return nil, err
	}
	dialOpts := bufferOptions()
	if c.DevInsecureH2C {
		if !opts.AllowH2C {
			return nil, ErrInsecureH2C
		}
		dialOpts = append(dialOpts, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if opts.Identity != nil {
			dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(nodeHeader(opts.Identity.NodeID)))
		}
	} else {
		tlsConfig := ClientTLS(c.ServingCASPKIPin, c.ServerName(), nil)
		if id := opts.Identity; id != nil {
			id.Resumable(tlsConfig, c.ServingCASPKIPin, c.ServerName())
		}
		creds := learningGroups(credentials.NewTLS(tlsConfig), tlsConfig)
		dialOpts = append(dialOpts, grpc.WithTransportCredentials(creds))
	}
	return grpc.NewClient(target, dialOpts...)
}

// BufferBytes is the read and the write buffer of a connection to the
// gateway. grpc-go's defaults are 32 KiB each, held for the life of the
// connection; a node's frames are small (the largest, an inventory report,
// is read in several reads), and `bcd sim` holds one connection per agent,
// so 8 KiB each, the write buffer shared (taken from a pool only while a
// write is under way). HTTP/2's flow-control windows stay grpc-go's: a
// window is a credit, not memory held.
const BufferBytes = 8 << 10

// bufferOptions are the buffer sizes of every dial.
func bufferOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithReadBufferSize(BufferBytes),
		grpc.WithWriteBufferSize(BufferBytes),
		grpc.WithSharedWriteBuffer(true),
	}
}

// nodeHeader is the dev gateway's header authentication.
type nodeHeader string

func (h nodeHeader) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"x-bc-test-node": string(h)}, nil
}

func (nodeHeader) RequireTransportSecurity() bool { return false }
