// Package atexit runs the cleanups that must happen before bcd's process
// ends or is replaced: after a command returns, on a panic in main's
// goroutine, and right before an exec (a self-update). A fakehw TPM
// registers here, so that its swtpm is stopped orderly on every one of
// those paths (an unorderly stop counts toward the TPM's dictionary-attack
// lockout). Nothing can run on SIGKILL or a panic in another goroutine:
// there swtpm gets SIGTERM from the kernel (Pdeathsig).
package atexit

import (
	"maps"
	"slices"
	"sync"
)

var (
	mu    sync.Mutex
	next  int
	hooks = map[int]func(){}
)

// Register adds fn to the cleanups and returns a function that removes it
// (call it once fn has run on its own, e.g. after a deferred close).
func Register(fn func()) (unregister func()) {
	mu.Lock()
	defer mu.Unlock()
	id := next
	next++
	hooks[id] = fn
	return func() {
		mu.Lock()
		defer mu.Unlock()
		delete(hooks, id)
	}
}

// Run runs every registered cleanup once, the latest first, and forgets
// them. Call it before os.Exit and syscall.Exec.
func Run() {
	mu.Lock()
	ids := slices.Sorted(maps.Keys(hooks))
	fns := make([]func(), 0, len(ids))
	for _, id := range slices.Backward(ids) {
		fns = append(fns, hooks[id])
		delete(hooks, id)
	}
	mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}
