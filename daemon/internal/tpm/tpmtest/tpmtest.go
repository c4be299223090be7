// Package tpmtest gives tests a software TPM: swtpm started on a copy of
// the committed state (testdata/tpm/tpm2-00.permall, whose EK certificate
// the test manufacturer root testdata/tpm/ek-root.der issued), stopped
// orderly at the end of the test, and a check that this process left no
// swtpm running. Without swtpm a test skips, and fails under CI=true.
// Only tests import it.
package tpmtest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"bcd/internal/testrepo"
	"bcd/internal/tpm"
	"bcd/internal/tpm/swtpm"
)

// Require skips the test without swtpm (fails it under CI=true).
func Require(t testing.TB) {
	t.Helper()
	if swtpm.Available() {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("swtpm is not installed (CI=true)")
	}
	t.Skip("swtpm is not installed (cargo xtask prereqs)")
}

// StatePath is the committed swtpm state.
func StatePath(t testing.TB) string {
	t.Helper()
	return testrepo.Path(t, "tpm", "tpm2-00.permall")
}

// EKRoot is the test manufacturer root (DER).
func EKRoot(t testing.TB) []byte {
	t.Helper()
	return testrepo.Read(t, "tpm", "ek-root.der")
}

// Open starts swtpm on a copy of the committed state and connects; the
// cleanup disconnects, stops swtpm orderly and checks it is gone.
func Open(t testing.TB) *tpm.TPM {
	t.Helper()
	Require(t)
	s, err := swtpm.StartOnCopy(StatePath(t))
	if err != nil {
		t.Fatal(err)
	}
	tp, err := tpm.Dial(s.Addr(), 30*time.Second)
	if err != nil {
		s.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tp.Close()
		if err := s.Stop(); err != nil {
			t.Errorf("stopping swtpm: %v", err)
		}
		NoSwtpmLeft(t)
	})
	return tp
}

// NoSwtpmLeft fails the test if a swtpm started by this process still runs.
func NoSwtpmLeft(t testing.TB) {
	t.Helper()
	if pids := Children("swtpm"); len(pids) > 0 {
		t.Errorf("swtpm left running: pids %v", pids)
	}
}

// Children lists the live child processes of this process named comm
// (from /proc; none where there is no /proc).
func Children(comm string) []int {
	entries, _ := os.ReadDir("/proc")
	me := os.Getpid()
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		s := string(stat)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if len(fields) < 2 || s[open+1:end] != comm || fields[0] == "Z" {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid == me {
			out = append(out, pid)
		}
	}
	return out
}
