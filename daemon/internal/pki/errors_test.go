// Tests of the refusal type: codes survive wrapping. (The code list itself is
// generated from proto/refusals.toml for both languages.)

package pki

import (
	"errors"
	"fmt"
	"testing"
)

func TestCodesSurviveWrapping(t *testing.T) {
	err := fmt.Errorf("joining: %w", refuseWith(CodeJWEDecrypt, errors.New("cause"), "JWE decryption failed"))
	if !errors.Is(err, CodeJWEDecrypt) || errors.Is(err, CodeJWEKid) {
		t.Fatal("errors.Is does not match the code")
	}
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeJWEDecrypt || CodeOf(err) != CodeJWEDecrypt {
		t.Fatal("errors.As or CodeOf does not find the refusal")
	}
	if got := err.Error(); got != "joining: jwe-decrypt: JWE decryption failed: cause" {
		t.Fatalf("message %q", got)
	}
	if CodeOf(errors.New("other")) != "" {
		t.Fatal("CodeOf found a code in a foreign error")
	}
}
