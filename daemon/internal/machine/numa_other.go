//go:build !linux

// A host that is not Linux reports no pressure.

package machine

import (
	"fmt"

	"bcd/internal/proto/agentv1"
)

// Pressure is unsupported off Linux.
func (h *Host) Pressure() (*agentv1.HostPressure, error) {
	return nil, fmt.Errorf("pressure: %w (no /proc/pressure)", ErrUnsupported)
}
