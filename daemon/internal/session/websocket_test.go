// Tests of the WebSocket transport's close frames: a refusal becomes the
// gRPC status the gRPC transport would have returned, so cert-revoked is a
// revocation on both.

package session

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/coder/websocket"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestCloseFramesBecomeWhatGRPCWouldSay(t *testing.T) {
	revoked := closeError(fmt.Errorf("failed to read: %w", websocket.CloseError{Code: 4007, Reason: "cert-revoked: certificate 01 was revoked"}))
	if st, _ := status.FromError(revoked); st.Code() != codes.PermissionDenied || !isRevocation(revoked) {
		t.Fatalf("4007 cert-revoked became %v", revoked)
	}
	hello := closeError(websocket.CloseError{Code: 4003, Reason: "hello-expected: no frame within 1500 ms"})
	if st, _ := status.FromError(hello); st.Code() != codes.InvalidArgument || st.Message() != "hello-expected: no frame within 1500 ms" || isRevocation(hello) {
		t.Fatalf("4003 became %v", hello)
	}
	if err := closeError(websocket.CloseError{Code: websocket.StatusNormalClosure}); !errors.Is(err, io.EOF) {
		t.Fatalf("a normal close became %v", err)
	}
	if err := closeError(websocket.CloseError{Code: websocket.StatusGoingAway}); status.Code(err) != codes.Unknown || errors.Is(err, io.EOF) {
		t.Fatalf("going away became %v", err)
	}
	plain := errors.New("connection reset")
	if closeError(plain) != plain {
		t.Fatal("a transport error changed")
	}
}
