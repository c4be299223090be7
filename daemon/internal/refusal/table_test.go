// Tests of the generated table: every code once, each with a real status,
// and refusals built from it carry that status and "<code>: " first.

package refusal

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestTheTableNamesEveryCodeOnceWithAStatus(t *testing.T) {
	seen := map[Code]bool{}
	for _, e := range Entries() {
		if seen[e.Code] {
			t.Fatalf("%s twice", e.Code)
		}
		seen[e.Code] = true
		if e.GRPC == codes.OK || e.GRPC == codes.Unknown || e.Domain == "" || e.Meaning == "" {
			t.Fatalf("entry %+v", e)
		}
		if got, ok := Lookup(e.Code); !ok || got != e || e.Code.GRPC() != e.GRPC {
			t.Fatalf("lookup of %s: %+v", e.Code, got)
		}
	}
	if CodeCertUnknown.GRPC() != codes.Unauthenticated || CodeMethodUnsupported.GRPC() != codes.Unimplemented {
		t.Fatal("the gateway's codes have other statuses than the list's")
	}
	if Code("no-such-code").GRPC() != codes.Unknown {
		t.Fatal("a string outside the table has a status")
	}
}

func TestStatusesComeFromTheTable(t *testing.T) {
	st, _ := status.FromError(Status(CodeTokenUnknown, "no token %d", 7))
	if st.Code() != codes.PermissionDenied || st.Message() != "token-unknown: no token 7" {
		t.Fatalf("status %v", st)
	}
	wrapped := fmt.Errorf("joining: %w", Wrap(CodeHelloExpected, errors.New("EOF"), "no Hello"))
	st, _ = status.FromError(StatusOf(wrapped))
	if st.Code() != codes.InvalidArgument || st.Message() != "hello-expected: no Hello: EOF" {
		t.Fatalf("status %v", st)
	}
	st, _ = status.FromError(StatusOf(errors.New("disk full")))
	if st.Code() != codes.Internal || st.Message() != "internal: disk full" {
		t.Fatalf("status %v", st)
	}
}

// CodeOfStatus reads the code of a "<code>: <detail>" status and nothing else.
func TestCodeOfStatusReadsTheContractsPrefix(t *testing.T) {
	for _, c := range []struct {
		err  error
		want Code
	}{
		{Status(CodeCertUnknown, "no certificate %s", "x"), CodeCertUnknown},
		{status.Error(codes.PermissionDenied, "cert-validity: expired"), "cert-validity"},
		{status.Error(codes.Unavailable, "not-a-code: x"), ""},
		{status.Error(codes.Unavailable, "connection refused"), ""},
		{errors.New("cert-unknown: not a status"), ""},
		{fmt.Errorf("before the Welcome: %w", Status(CodeCertUnknown, "x")), CodeCertUnknown},
		{nil, ""},
	} {
		if got := CodeOfStatus(c.err); got != c.want {
			t.Errorf("CodeOfStatus(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
