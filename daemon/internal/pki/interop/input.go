// The input of a case, read member by member as the Rust side's run.rs reads
// it; the first missing or ill-typed member sticks as a *BadCase.

package interop

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"bcd/internal/pki"
	"google.golang.org/protobuf/proto"
)

// BadCase is a malformed case: a bug in the fixture file, not a refusal.
type BadCase struct{ Reason string }

func (e *BadCase) Error() string { return "malformed case: " + e.Reason }

func badCase(format string, args ...any) error { return &BadCase{Reason: fmt.Sprintf(format, args...)} }

// input reads a case's input members; err holds the first problem.
type input struct {
	members map[string]json.RawMessage
	keys    *Keyring
	err     error
}

func (in *input) fail(format string, args ...any) {
	if in.err == nil {
		in.err = badCase(format, args...)
	}
}

// has reports whether the member is there.
func (in *input) has(name string) bool {
	_, ok := in.members[name]
	return ok
}

// lookup reads an optional string member without failing the input.
func (in *input) lookup(name string) (string, bool) {
	raw, ok := in.members[name]
	if !ok || string(raw) == "null" {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// isNull reports whether the member is there and null.
func (in *input) isNull(name string) bool { return string(in.members[name]) == "null" }

// decode decodes a member that must be present and not null into v.
func (in *input) decode(name, what string, v any) bool {
	raw, ok := in.members[name]
	if !ok {
		in.fail("missing input.%s", name)
		return false
	}
	if string(raw) == "null" || json.Unmarshal(raw, v) != nil {
		in.fail("input.%s is not %s", name, what)
		return false
	}
	return true
}

func (in *input) string(name string) string {
	var s string
	in.decode(name, "a string", &s)
	return s
}

func (in *input) int(name string) int64 {
	var n int64
	in.decode(name, "an integer", &n)
	return n
}

func (in *input) time(name string) time.Time { return time.UnixMilli(in.int(name)) }

func (in *input) bytes(name string) []byte {
	var s string
	if !in.decode(name, "a string", &s) {
		return nil
	}
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil {
		in.fail("input.%s is not base64", name)
	}
	return b
}

// message decodes a member holding a protobuf message in base64.
func (in *input) message(name string, m proto.Message) {
	if b := in.bytes(name); in.err == nil {
		if err := proto.Unmarshal(b, m); err != nil {
			in.fail("input.%s: %v", name, err)
		}
	}
}

// public returns the public key of the label in a member.
func (in *input) public(name string) *pki.PublicKey {
	label := in.string(name)
	if in.err != nil {
		return nil
	}
	key, err := in.keys.Public(label)
	if err != nil {
		in.fail("%v", err)
	}
	return key
}

// publics returns the public keys of the labels in a member.
func (in *input) publics(name string) []*pki.PublicKey {
	var labels []string
	in.decode(name, "an array of strings", &labels)
	keys := make([]*pki.PublicKey, 0, len(labels))
	for _, label := range labels {
		key, err := in.keys.Public(label)
		if err != nil {
			in.fail("%v", err)
		}
		keys = append(keys, key)
	}
	return keys
}

// p256 returns the P-256 private key of the label in a member.
func (in *input) p256(name string) *ecdsa.PrivateKey {
	label := in.string(name)
	if in.err != nil {
		return nil
	}
	key, err := in.keys.P256(label)
	if err != nil {
		in.fail("%v", err)
	}
	return key
}

// ed25519 returns the Ed25519 private key of the label in a member.
func (in *input) ed25519(name string) ed25519.PrivateKey {
	label := in.string(name)
	if in.err != nil {
		return nil
	}
	key, err := in.keys.Ed(label)
	if err != nil {
		in.fail("%v", err)
	}
	return key
}
