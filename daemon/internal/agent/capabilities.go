// What this bcd advertises in its Hello (docs/protocol.md,
// "Capabilities"): events.v1, cdi and signed-intent always, and what the
// machine supports: binding.kubernetes (a hold's CDI spec carries the
// binding for the kubelet), devices.limits (a machine that runs a hold's
// booked share in a slice, machine.Slices), nvml (a machine whose GPUs are
// read through NVML, machine.NVML); and instance.network-policy on a VPS
// host with a runtime that enforces an instance's network policy
// (runtime.PolicyEnforcer: libvirt-kvm and cloud-hypervisor through bcd
// helper's tap guards; not fakehw's, whose guests have no network). A
// machine may replace the whole list (machine.CapabilityOverride: fakehw's
// BCD_FAKEHW_CAPABILITIES, an older bcd's set), and the control plane
// books host-resource and Kubernetes reservations, and places instances
// with a network policy, only on a node advertising them.

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
	CapNetworkPolicy     = "instance.network-policy"
)

// Capabilities are what every bcd advertises: an older bcd's whole set.
var Capabilities = []string{CapEvents, CapCDI, CapSignedIntent}

// CapabilitiesOf is what this bcd advertises on m (without a runtime that
// enforces network policies: CapabilitiesWith).
func CapabilitiesOf(m machine.Machine) []string {
	return CapabilitiesWith(m, false)
}

// CapabilitiesWith is what this bcd advertises on m, with
// instance.network-policy when policies says a runtime of its instances
// reconciler enforces them; a machine's override replaces it all.
func CapabilitiesWith(m machine.Machine, policies bool) []string {
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
	if policies {
		out = append(out, CapNetworkPolicy)
	}
	return out
}
