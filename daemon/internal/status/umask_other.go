//go:build !unix

// Elsewhere there is no umask: the chmod after Listen sets the mode.

package status

func privateUmask() (restore func()) { return func() {} }
