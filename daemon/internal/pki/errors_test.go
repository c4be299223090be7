// Tests of the refusal type: the code list matches the Rust side's, and
// codes survive wrapping.

package pki

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"testing"
)

func TestCodesAreTheRustCodes(t *testing.T) {
	src, err := os.ReadFile("../../../pki/src/error.rs")
	if err != nil {
		t.Skipf("the Rust source is not beside this module: %v", err)
	}
	list := regexp.MustCompile(`(?s)pub const CODES: &'static \[&'static str\] = &\[(.*?)\];`).FindSubmatch(src)
	if list == nil {
		t.Fatal("no CODES list in pki/src/error.rs")
	}
	var rust []Code
	for _, m := range regexp.MustCompile(`"([a-z0-9-]+)"`).FindAllSubmatch(list[1], -1) {
		rust = append(rust, Code(m[1]))
	}
	// Go's list must be the start of Rust's, in the same order: a renamed,
	// removed or moved code fails. Codes appended on the Rust side for
	// verifiers Go does not have yet (TPM attestation lives elsewhere) are
	// listed, not failed.
	if len(rust) < len(Codes) || fmt.Sprint(rust[:len(Codes)]) != fmt.Sprint(Codes) {
		t.Fatalf("pki::Error::CODES and pki.Codes differ; add codes on both sides at once\nRust %v\nGo   %v", rust, Codes)
	}
	if extra := rust[len(Codes):]; len(extra) > 0 {
		t.Logf("Rust codes without a Go verifier in this package yet: %v", extra)
	}
}

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
