// Tests of the shared refusal type.
package refusal

import (
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestARefusalMatchesItsCodeAndKeepsItsCause(t *testing.T) {
	const code Code = "jwe-decrypt"
	err := fmt.Errorf("opening the token: %w", Wrap(code, io.ErrUnexpectedEOF, "tag mismatch"))
	if !errors.Is(err, code) || errors.Is(err, Code("jwe-kid")) {
		t.Fatalf("errors.Is by code failed for %v", err)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatal("the cause is lost")
	}
	if CodeOf(err) != code || CodeOf(io.EOF) != "" {
		t.Fatalf("CodeOf: %q", CodeOf(err))
	}
	if got := New(code, "%d bytes", 3).Error(); got != "jwe-decrypt: 3 bytes" {
		t.Fatalf("message %q", got)
	}
	if got := (&Error{Code: code}).Error(); got != "jwe-decrypt" {
		t.Fatalf("message %q", got)
	}
}
