// Refusals of self-update (ARCHITECTURE.md, "Self-update"): each is a Code,
// a stable string that starts the reason a daemon.upgrade fails with and the
// error a bcd helper answers, so "<code>: <detail>" reads the same on every
// path. The release checks themselves keep pki's codes (release-threshold,
// release-digest, …).

package update

import (
	"errors"
	"fmt"
)

// Code is a stable refusal code.
type Code string

// Error makes a Code usable as a sentinel with errors.Is.
func (c Code) Error() string { return string(c) }

// The codes of self-update, besides pki's release codes.
const (
	// CodeConfig: the [update] table cannot be used.
	CodeConfig Code = "update-config"
	// CodeNotInstalled: bcd does not run behind an entrypoint with slots.
	CodeNotInstalled Code = "update-not-installed"
	// CodeParams: the daemon.upgrade params are not {"manifest": <envelope>}.
	CodeParams Code = "update-params"
	// CodeDownload: the artifact could not be downloaded.
	CodeDownload Code = "release-download"
	// CodeReleaseFailed: this release was rolled back before; it is not prepared again.
	CodeReleaseFailed Code = "update-release-failed"
	// CodeNothingStaged: there is no staged file.
	CodeNothingStaged Code = "update-nothing-staged"
	// CodeStagedSymlink: the staged path is a symbolic link.
	CodeStagedSymlink Code = "update-staged-symlink"
	// CodeStagedNotFile: the staged path is not a regular file.
	CodeStagedNotFile Code = "update-staged-not-file"
	// CodeStagedOwner: the staged file is not owned by the node's user (a
	// hard link to a root file, say).
	CodeStagedOwner Code = "update-staged-owner"
	// CodeStagedBytes: the staged bytes are not the prepared release's.
	CodeStagedBytes Code = "update-staged-bytes"
	// CodeNothingPrepared: swap without a prepared release.
	CodeNothingPrepared Code = "update-nothing-prepared"
	// CodePending: an upgrade already waits for its confirmation.
	CodePending Code = "update-pending"
	// CodeNotPending: no upgrade waits (confirm, rollback, settle).
	CodeNotPending Code = "update-not-pending"
	// CodeVersion: the version named is not the pending upgrade's.
	CodeVersion Code = "update-version"
	// CodeRolledBack: the pending upgrade was rolled back; it cannot be confirmed.
	CodeRolledBack Code = "update-rolled-back"
	// CodeNotRolledBack: settle before the rollback.
	CodeNotRolledBack Code = "update-not-rolled-back"
	// CodeRollback: the reason a rolled-back upgrade fails with.
	CodeRollback Code = "rollback"
)

// Error is a refusal: Code is the contract, Detail is for humans (never a secret).
type Error struct {
	// Code is the stable code.
	Code Code
	// Detail says what was wrong.
	Detail string
	// Err is the cause, if any.
	Err error
}

// Error returns "code: detail[: cause]".
func (e *Error) Error() string {
	msg := string(e.Code)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is matches the Code.
func (e *Error) Is(target error) bool {
	c, ok := target.(Code)
	return ok && c == e.Code
}

// CodeOf returns the code of the first *Error in err's chain ("" for none).
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func refuse(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Detail: fmt.Sprintf(format, args...)}
}

func refuseWith(code Code, cause error, format string, args ...any) *Error {
	return &Error{Code: code, Detail: fmt.Sprintf(format, args...), Err: cause}
}
