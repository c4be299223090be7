//go:build unix

// The socket is created under umask 0177 so that it is never, even for an
// instant, readable by others.

package status

import "syscall"

func privateUmask() (restore func()) {
	old := syscall.Umask(0o177)
	return func() { syscall.Umask(old) }
}
