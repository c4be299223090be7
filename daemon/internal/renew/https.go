// Renewal over HTTPS (docs/protocol.md, "Renewal over HTTPS"): POST
// /v1/renew on the HTTPS listener of the WebSocket session, the same
// RenewRequest and RenewReply as Gateway.Renew in binary protobuf, on a
// TLS connection pinned as the gRPC dial and presenting the current
// certificate. A refusal is an HTTP error whose body is "<code>: <detail>".

package renew

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"bcd/internal/identity"
	"bcd/internal/proto/agentv1"
	"bcd/internal/refusal"
	"google.golang.org/protobuf/proto"
)

// The transports a renewal names in its log line.
const (
	transportGRPC  = "grpc"
	transportHTTPS = "https"
)

// ContentType is the request's and the answer's.
const ContentType = "application/x-protobuf"

// maxReply bounds what is read of an answer (a JoinResponse is a few KiB).
const maxReply = 1 << 20

// overHTTPS is POST /v1/renew.
func overHTTPS(ctx context.Context, cfg Config, req *agentv1.RenewRequest) (*agentv1.RenewReply, error) {
	url, err := cfg.Config.RenewURL()
	if err != nil {
		return nil, err
	}
	body, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	httpReq.Header.Set("Content-Type", ContentType)
	client := identity.HTTPSClient(cfg.Config, cfg.Identity)
	defer client.CloseIdleConnections()
	resp, err := client.Do(httpReq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxReply))
	if err != nil {
		return nil, fmt.Errorf("POST %s: reading the answer: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, answerError(url, resp.StatusCode, data)
	}
	reply := &agentv1.RenewReply{}
	if err := proto.Unmarshal(data, reply); err != nil {
		return nil, fmt.Errorf("%w: the answer is not a RenewReply: %w", ErrResponse, err)
	}
	return reply, nil
}

// answerError is an HTTP error: a refusal when its body starts with a
// known code, else the status and the start of the body.
func answerError(url string, code int, body []byte) error {
	text := strings.TrimSpace(string(body))
	name, _, _ := strings.Cut(text, ":")
	if _, known := refusal.Lookup(refusal.Code(name)); known {
		return fmt.Errorf("%w: %s", ErrRefused, text)
	}
	if len(text) > 200 {
		text = text[:200]
	}
	return fmt.Errorf("POST %s: HTTP %d: %q", url, code, text)
}
