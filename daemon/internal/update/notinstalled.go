// NotInstalled, the Store of a bcd that has [update] but does not run
// behind an entrypoint: nothing is pending, every change is refused
// update-not-installed.

package update

import (
	"bcd/internal/pki"
)

// NotInstalled is the Store of a bcd that has [update] but does not run
// behind an entrypoint: nothing is pending, and every change is refused
// with Err (update-not-installed).
type NotInstalled struct {
	// Err says why.
	Err error
}

var _ Store = NotInstalled{}

func (n NotInstalled) refusal() error {
	if n.Err != nil {
		return n.Err
	}
	return refuse(CodeNotInstalled, "bcd does not run behind an entrypoint")
}

// Current refuses.
func (n NotInstalled) Current() (string, error) { return "", n.refusal() }

// Entrypoint is empty.
func (n NotInstalled) Entrypoint() string { return "" }

// Pending is nothing.
func (n NotInstalled) Pending() (*Record, error) { return nil, nil }

// Installed is nothing.
func (n NotInstalled) Installed() (*Release, error) { return nil, nil }

// Failed is nothing.
func (n NotInstalled) Failed() ([]Release, error) { return nil, nil }

// Prepare refuses.
func (n NotInstalled) Prepare(*pki.Envelope) (*Release, error) { return nil, n.refusal() }

// Swap refuses.
func (n NotInstalled) Swap(SwapRequest) (*Record, error) { return nil, n.refusal() }

// Confirm refuses.
func (n NotInstalled) Confirm(string) (*Record, error) { return nil, n.refusal() }

// Rollback refuses.
func (n NotInstalled) Rollback() (*Record, error) { return nil, n.refusal() }

// Settle refuses.
func (n NotInstalled) Settle(string) (*Record, error) { return nil, n.refusal() }
