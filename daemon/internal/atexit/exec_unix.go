//go:build unix

// Exec: the cleanups, then the process replaced (a self-update).

package atexit

import "syscall"

// Exec runs the cleanups, then replaces the process with argv0 (syscall.Exec).
// It returns only when the exec fails, and the cleanups have run then too.
func Exec(argv0 string, argv, envv []string) error {
	Run()
	return syscall.Exec(argv0, argv, envv)
}
