// Tests of the host's NUMA and huge page inventory over a /sys of files.

package machine

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"bcd/internal/proto/agentv1"
)

func TestTheHostReadsItsNUMANodesAndHugePages(t *testing.T) {
	sys := t.TempDir()
	write := func(rel, content string) {
		path := filepath.Join(sys, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("devices/system/node/node0/cpulist", "0-1,4\n")
	write("devices/system/node/node0/meminfo", "Node 0 MemTotal:       16384 kB\nNode 0 MemFree: 1 kB\n")
	write("devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages", "64\n")
	write("devices/system/node/node1/cpulist", "2-3\n")
	write("kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "64\n")
	s := &agentv1.SystemInventory{NumaNodes: 1}
	placementInventory(s, sys)
	if s.GetNumaNodes() != 2 || s.GetHugepages_2Mi() != 64 || s.GetHugepages_1Gi() != 0 {
		t.Fatalf("%+v", s)
	}
	n0, n1 := s.GetNuma()[0], s.GetNuma()[1]
	if !slices.Equal(n0.GetCpus(), []uint32{0, 1, 4}) || n0.GetMemoryBytes() != 16<<20 || n0.GetHugepages_2Mi() != 64 ||
		n1.GetId() != 1 || !slices.Equal(n1.GetCpus(), []uint32{2, 3}) {
		t.Fatalf("%+v %+v", n0, n1)
	}
	if got := ParseCPUList("0-2,x,7,5-4"); !slices.Equal(got, []uint32{0, 1, 2, 7}) {
		t.Fatalf("%v", got)
	}
}
