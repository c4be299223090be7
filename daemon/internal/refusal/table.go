// The table of every refusal code (proto/refusals.toml, generated into
// table_gen.go): its domain, the one gRPC status it goes out with, and its
// meaning; and the status of a refusal built from it.

package refusal

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Entry is one line of proto/refusals.toml.
type Entry struct {
	// Code is the stable code.
	Code Code
	// Domain says who refuses with it (pki's domains, the JoinService's,
	// the gateway's, bcd's own).
	Domain string
	// GRPC is the status the code goes out with on the wire.
	GRPC codes.Code
	// Meaning is one line for humans.
	Meaning string
}

var byCode = func() map[Code]Entry {
	m := make(map[Code]Entry, len(entries))
	for _, e := range entries {
		m[e.Code] = e
	}
	return m
}()

// Entries returns every code, in the order of proto/refusals.toml.
func Entries() []Entry { return append([]Entry(nil), entries...) }

// Lookup returns the entry of code c.
func Lookup(c Code) (Entry, bool) {
	e, ok := byCode[c]
	return e, ok
}

// GRPC is the gRPC status c goes out with; codes.Unknown for a string that
// is not in the table.
func (c Code) GRPC() codes.Code {
	if e, ok := byCode[c]; ok {
		return e.GRPC
	}
	return codes.Unknown
}

// Status is the refusal "<code>: <detail>" as a gRPC status error with the
// table's status for c.
func Status(c Code, format string, args ...any) error {
	return status.Error(c.GRPC(), string(c)+": "+fmt.Sprintf(format, args...))
}

// StatusOf turns err into a gRPC status error: a refusal (anywhere in its
// chain) goes out with its code's status and its own message ("<code>:
// <reason>[: <cause>]"); anything else is Internal.
func StatusOf(err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return status.Error(codes.Internal, string(CodeInternal)+": "+err.Error())
	}
	return status.Error(e.Code.GRPC(), e.Error())
}

// CodeOfStatus returns the code a gRPC status error carries by contract
// (its message is "<code>: <detail>"), also wrapped, or "" when err holds
// no status or its message starts with no code of the table.
func CodeOfStatus(err error) Code {
	// The innermost status's own message: status.FromError would give a
	// wrapped one the whole chain's text.
	var grpcErr interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &grpcErr) {
		return ""
	}
	st := grpcErr.GRPCStatus()
	if st == nil || st.Code() == codes.OK {
		return ""
	}
	head, _, _ := strings.Cut(st.Message(), ":")
	if _, known := byCode[Code(head)]; !known {
		return ""
	}
	return Code(head)
}
