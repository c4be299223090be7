// The host's sample read from a proc tree: the aggregate CPU line (nice
// counted as user), MemTotal and MemAvailable, each device but lo; and
// this machine's own /proc read without error.

package machine

import (
	"os"
	"path/filepath"
	"testing"
)

func TestAHostSampleIsReadFromProc(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "net"), 0o755)
	os.WriteFile(filepath.Join(root, "stat"), []byte("cpu  100 50 200 1000 30 0 0 0 0 0\ncpu0 100 50 200 1000 30 0 0 0 0 0\n"), 0o644)
	os.WriteFile(filepath.Join(root, "meminfo"), []byte("MemTotal:       1024 kB\nMemFree:   10 kB\nMemAvailable:    512 kB\n"), 0o644)
	os.WriteFile(filepath.Join(root, "net", "dev"), []byte("Inter-|   Receive |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes\n"+
		"    lo: 999 1 0 0 0 0 0 0 999 1 0 0 0 0 0 0\n  eth0: 1000 10 0 0 0 0 0 0 2000 20 0 0 0 0 0 0\n"), 0o644)
	s, err := ReadHostSample(root)
	if err != nil {
		t.Fatal(err)
	}
	if s.CPUSeconds["user"] != 1.5 || s.CPUSeconds["system"] != 2 || s.CPUSeconds["idle"] != 10 || s.CPUSeconds["iowait"] != 0.3 {
		t.Fatalf("cpu %v", s.CPUSeconds)
	}
	if s.MemoryTotalBytes != 1<<20 || s.MemoryAvailableBytes != 512<<10 {
		t.Fatalf("memory %d %d", s.MemoryTotalBytes, s.MemoryAvailableBytes)
	}
	if len(s.NICs) != 1 || s.NICs[0] != (NICSample{Device: "eth0", RxBytes: 1000, TxBytes: 2000}) {
		t.Fatalf("nics %v", s.NICs)
	}
	if _, err := ReadHostSample("/proc"); err != nil {
		t.Fatalf("this machine's /proc: %v", err)
	}
}
