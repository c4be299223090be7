// Refusals of self-update (docs/daemon.md, "Self-update in bcd"): each is a Code,
// a stable string that starts the reason a daemon.upgrade fails with and the
// error a bcd helper answers, so "<code>: <detail>" reads the same on every
// path. The release checks themselves keep pki's codes (release-threshold,
// release-digest, …).

package update

import (
	"fmt"

	"bcd/internal/refusal"
)

// Code is a stable refusal code.
type Code = refusal.Code

// The codes of self-update, besides pki's release codes, are generated from
// proto/refusals.toml into refusals_gen.go (cargo xtask codegen).

// Error is a refusal of this package (the shared refusal.Error).
type Error = refusal.Error

// CodeOf returns the code of the first refusal in err's chain, or "".
func CodeOf(err error) Code { return refusal.CodeOf(err) }

func refuse(code Code, format string, args ...any) *Error {
	return refusal.New(code, format, args...)
}

func refuseWith(code Code, cause error, format string, args ...any) *Error {
	return refusal.Wrap(code, cause, fmt.Sprintf(format, args...))
}
