//go:build !linux

// The non-Linux half of Host: only what the Go runtime knows.

package machine

import (
	"runtime"

	"bcd/internal/proto/agentv1"
)

func bootID() string { return "" }

func systemInventory(hostname string) *agentv1.SystemInventory {
	return &agentv1.SystemInventory{Hostname: hostname, CpuCores: uint32(runtime.NumCPU()), Os: runtime.GOOS}
}

func networkInventory() *agentv1.NetworkInventory { return &agentv1.NetworkInventory{} }
