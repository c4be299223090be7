// Package refusal is the one error type bcd's packages refuse with: a
// stable Code (the contract with the control plane and with the Rust side,
// the same string in both languages) and, for humans, a reason and a cause.
// pki, tpm/attestor, update and helper each name their own codes and alias
// this type, so a code reads the same whichever package refused.
package refusal

import (
	"errors"
	"fmt"
)

// Code is a stable refusal code. It is an error too, so that
// errors.Is(err, code) matches a refusal with that code.
type Code string

// Error returns the code itself.
func (c Code) Error() string { return string(c) }

// Error is a refusal: Code is the contract, Reason and Err are for humans.
// Neither ever holds secret material (tokens, plaintexts, keys).
type Error struct {
	// Code is the stable, shared code.
	Code Code
	// Reason says what was wrong, in a few words.
	Reason string
	// Err is the underlying cause, if any.
	Err error
}

// Error returns "code[: reason][: cause]".
func (e *Error) Error() string {
	msg := string(e.Code)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is this refusal's Code.
func (e *Error) Is(target error) bool {
	c, ok := target.(Code)
	return ok && c == e.Code
}

// CodeOf returns the code of the first refusal in err's chain, or "" when
// err holds none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// New builds a refusal with a formatted reason.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Reason: fmt.Sprintf(format, args...)}
}

// Wrap builds a refusal with a reason that wraps a cause.
func Wrap(code Code, cause error, reason string) *Error {
	return &Error{Code: code, Reason: reason, Err: cause}
}
