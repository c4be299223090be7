// What this bcd advertises in its Hello (docs/protocol.md,
// "Capabilities"): events.v1, cdi and signed-intent always, and what the
// machine supports: binding.kubernetes (a hold's CDI spec carries the
// binding for the kubelet), devices.limits (a machine that runs a hold's
// booked share in a slice, machine.Slices), nvml (a machine whose GPUs are
// read through NVML, machine.NVML). A machine may replace the whole list
// (machine.CapabilityOverride: fakehw's BCD_FAKEHW_CAPABILITIES, an older
// bcd's set), and the control plane books host-resource and Kubernetes
// reservations only on a node advertising them.

package agent

import "bcd/internal/machine"

// The capabilities bcd may advertise.
const (
	CapEvents            = "events.v1"
	CapCDI               = "cdi"
	CapSignedIntent      = "signed-intent"
	CapBindingKubernetes = "binding.kubernetes"
	CapDevicesLimits     = "devices.limits"
	CapNVML              = "nvml"
)

// Capabilities are what every bcd advertises: an older bcd's whole set.
var Capabilities = []string{CapEvents, CapCDI, CapSignedIntent}

// CapabilitiesOf is what this bcd advertises on m.
func CapabilitiesOf(m machine.Machine) []string {
	if o, ok := m.(machine.CapabilityOverride); ok {
		if list, set := o.Capabilities(); set {
			return list
		}
	}
	out := append(append([]string{}, Capabilities...), CapBindingKubernetes)
	if _, ok := m.(machine.Slices); ok {
		out = append(out, CapDevicesLimits)
	}
	if n, ok := m.(machine.NVML); ok && n.HasNVML() {
		out = append(out, CapNVML)
	}
	return out
}
