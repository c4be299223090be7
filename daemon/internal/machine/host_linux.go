// The Linux half of Host: /proc and /etc/os-release.

package machine

import (
	"bufio"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"

	"bcd/internal/proto/agentv1"
)

func bootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}

func systemInventory(hostname string) *agentv1.SystemInventory {
	s := &agentv1.SystemInventory{Hostname: hostname, CpuCores: uint32(runtime.NumCPU()), NumaNodes: 1}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				s.CpuModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseUint(f[1], 10, 64)
				s.MemoryBytes = kb * 1024
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		s.Kernel = strings.TrimSpace(string(b))
	}
	placementInventory(s, "/sys")
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				s.Os = strings.Trim(v, `"`)
			}
		}
	}
	return s
}

func networkInventory() *agentv1.NetworkInventory {
	inv := &agentv1.NetworkInventory{}
	ifaces, _ := net.Interfaces()
	for _, i := range ifaces {
		if i.Flags&net.FlagLoopback != 0 || len(i.HardwareAddr) == 0 {
			continue
		}
		inv.Nics = append(inv.Nics, &agentv1.Nic{Name: i.Name, Mac: i.HardwareAddr.String()})
	}
	return inv
}
