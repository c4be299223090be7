// Tests of the swtpm runner: a start and an orderly stop leave no process.

package swtpm

import (
	"errors"
	"os"
	"syscall"
	"testing"
)

func TestStopIsOrderlyAndLeavesNoProcess(t *testing.T) {
	if !Available() {
		if os.Getenv("CI") == "true" {
			t.Fatal("swtpm is not installed (CI=true)")
		}
		t.Skip("swtpm is not installed")
	}
	s, err := Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pid := s.Pid()
	if err := s.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("swtpm %d still runs (%v)", pid, err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("a second stop: %v", err)
	}
}

func TestStartOnCopyLeavesTheCommittedStateAlone(t *testing.T) {
	if !Available() {
		t.Skip("swtpm is not installed")
	}
	const permall = "../../../../testdata/tpm/tpm2-00.permall"
	before, err := os.ReadFile(permall)
	if err != nil {
		t.Fatal(err)
	}
	s, err := StartOnCopy(permall)
	if err != nil {
		t.Fatal(err)
	}
	dir := s.StateDir()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(permall)
	if string(before) != string(after) {
		t.Fatal("the committed state changed")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the temporary state %s is still there", dir)
	}
}
