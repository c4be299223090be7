// Fallback: a Dialer that tries transports in order (docs/protocol.md,
// "WebSocket transport"): with both gateway_url and [websocket] url, the
// gRPC gateway first and, when it cannot be dialed, the WebSocket. Each
// dial starts again from the first, so a gateway that comes back is used
// again on the next reconnect.

package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
)

// Transport is a named Dialer.
type Transport struct {
	// Name names it in logs ("grpc", "websocket").
	Name string
	// Dial opens its streams.
	Dial Dialer
}

// Fallback returns a Dialer that tries each transport in order and returns
// the first stream opened; when none opens, the errors of all. A transport
// after the first is logged session.fallback.
func Fallback(log *slog.Logger, transports ...Transport) Dialer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(ctx context.Context) (Stream, func(), error) {
		var errs []error
		for i, t := range transports {
			stream, closeConn, err := t.Dial(ctx)
			if err == nil {
				if i > 0 {
					log.Warn("session.fallback", "transport", t.Name, "after", errors.Join(errs...).Error())
				}
				return stream, closeConn, nil
			}
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			errs = append(errs, fmt.Errorf("%s: %w", t.Name, err))
		}
		return nil, nil, errors.Join(errs...)
	}
}
