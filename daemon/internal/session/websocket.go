// The WebSocket transport of the session (docs/protocol.md, "WebSocket
// transport"): a Dialer of the dev stack's /v1/session over the node's
// pinned mTLS (identity.HTTPSClient), one binary protobuf frame per
// message, with github.com/coder/websocket. The gateway's close frames
// become what the gRPC transport would have returned: a normal close
// (1000) io.EOF, a refusal (4000 + its gRPC code, reason
// "<code>: <detail>") the gRPC status of that code and message, so the
// session's rules (cert-revoked → ErrRevoked) are the same on both.

package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"bcd/internal/config"
	"bcd/internal/identity"
	"bcd/internal/proto/agentv1"
	"github.com/coder/websocket"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// MaxFrameBytes is the largest frame either side accepts (the gateway's
// 1 MiB decoding limit).
const MaxFrameBytes = 1 << 20

// RefusalCloseBase is the first close code of refusals: a refusal closes
// with RefusalCloseBase plus its gRPC status code.
const RefusalCloseBase = 4000

// closeWait bounds how long releasing a stream waits for its close
// handshake.
const closeWait = time.Second

// WebsocketDialer returns a Dialer of the WebSocket session at c's
// [websocket] url as the node of id. Each stream is one WebSocket on its
// own TLS connection, whose handshake presents the certificate of the
// moment.
func WebsocketDialer(c *config.Config, id *identity.Identity) Dialer {
	return func(ctx context.Context) (Stream, func(), error) {
		conn, resp, err := websocket.Dial(ctx, c.Websocket.URL, &websocket.DialOptions{
			HTTPClient:      identity.HTTPSClient(c, id),
			CompressionMode: websocket.CompressionDisabled,
		})
		if err != nil {
			if resp != nil {
				return nil, nil, fmt.Errorf("websocket %s: HTTP %d: %w", c.Websocket.URL, resp.StatusCode, err)
			}
			return nil, nil, fmt.Errorf("websocket %s: %w", c.Websocket.URL, err)
		}
		conn.SetReadLimit(MaxFrameBytes)
		s := &wsStream{ctx: ctx, conn: conn, closed: make(chan struct{})}
		return s, s.release, nil
	}
}

// wsStream is a Stream over one WebSocket.
type wsStream struct {
	ctx       context.Context
	conn      *websocket.Conn
	closeOnce sync.Once
	closing   bool
	closed    chan struct{}
	mu        sync.Mutex
}

func (*wsStream) Transport() string { return "websocket" }

func (s *wsStream) Send(f *agentv1.NodeFrame) error {
	data, err := proto.Marshal(f)
	if err != nil {
		return err
	}
	if err := s.conn.Write(s.ctx, websocket.MessageBinary, data); err != nil {
		// As over gRPC, a send on a stream the gateway closed is io.EOF;
		// Recv says why.
		if websocket.CloseStatus(err) != -1 || errors.Is(err, io.EOF) {
			return io.EOF
		}
		return err
	}
	return nil
}

func (s *wsStream) Recv() (*agentv1.GatewayFrame, error) {
	typ, data, err := s.conn.Read(s.ctx)
	if err != nil {
		return nil, closeError(err)
	}
	if typ != websocket.MessageBinary {
		return nil, errors.New("websocket: the gateway sent a text message")
	}
	f := &agentv1.GatewayFrame{}
	if err := proto.Unmarshal(data, f); err != nil {
		return nil, fmt.Errorf("websocket: a message that is not a GatewayFrame: %w", err)
	}
	return f, nil
}

// CloseSend starts the close handshake (a normal close); it does not wait.
func (s *wsStream) CloseSend() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
		go func() {
			_ = s.conn.Close(websocket.StatusNormalClosure, "")
			close(s.closed)
		}()
	})
	return nil
}

// release ends the connection: after a started close handshake, once it
// finished (or closeWait passed); at once otherwise.
func (s *wsStream) release() {
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		select {
		case <-s.closed:
		case <-time.After(closeWait):
		}
	}
	_ = s.conn.CloseNow()
}

// closeError maps a read error: the gateway's normal close is io.EOF, its
// refusal the gRPC status of its code; anything else stays as it is.
func closeError(err error) error {
	var ce websocket.CloseError
	if !errors.As(err, &ce) {
		return err
	}
	switch {
	case ce.Code == websocket.StatusNormalClosure:
		return io.EOF
	case ce.Code > RefusalCloseBase && ce.Code <= RefusalCloseBase+websocket.StatusCode(codes.Unauthenticated):
		return status.Error(codes.Code(ce.Code-RefusalCloseBase), ce.Reason)
	}
	return fmt.Errorf("websocket: closed by the gateway: %w", err)
}
