// Refusals of self-update (ARCHITECTURE.md, "Self-update"): each is a Code,
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
