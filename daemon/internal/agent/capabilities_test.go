// Tests of what a bcd advertises: a fakehw machine everything it supports,
// the knob an older bcd's set, a machine without slices or NVML neither
// devices.limits nor nvml, and instance.network-policy only with a runtime
// that enforces policies (and not under the knob).

package agent

import (
	"slices"
	"testing"

	"bcd/internal/fakehw"
	"bcd/internal/machine"
)

type bare struct{ machine.Machine }

func TestCapabilitiesFollowTheMachine(t *testing.T) {
	m, err := fakehw.New(t.TempDir(), "41", fakehw.VariantHGXH100)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{CapEvents, CapCDI, CapSignedIntent, CapBindingKubernetes, CapDevicesLimits, CapNVML}
	if got := CapabilitiesOf(m); !slices.Equal(got, want) {
		t.Fatalf("fakehw advertises %v, want %v", got, want)
	}
	if got := CapabilitiesOf(bare{m}); !slices.Equal(got, []string{CapEvents, CapCDI, CapSignedIntent, CapBindingKubernetes}) {
		t.Fatalf("a machine without slices or NVML advertises %v", got)
	}
	getenv := func(v string) func(string) string {
		return func(name string) string {
			if name == fakehw.EnvCapabilities {
				return v
			}
			return ""
		}
	}
	if got := CapabilitiesWith(m, true); !slices.Equal(got, append(want, CapNetworkPolicy)) {
		t.Fatalf("with a runtime that enforces policies: %v", got)
	}
	if got := CapabilitiesWith(m, false); !slices.Equal(got, want) {
		t.Fatalf("without one: %v", got)
	}
	for knob, want := range map[string][]string{"events.v1, cdi,signed-intent": Capabilities, "-": {}} {
		f, bad := fakehw.FaultsFromEnv(getenv(knob))
		if len(bad) > 0 {
			t.Fatal(bad)
		}
		m.SetFaults(f)
		if got := CapabilitiesOf(m); !slices.Equal(got, want) {
			t.Fatalf("knob %q: %v, want %v", knob, got, want)
		}
		if got := CapabilitiesWith(m, true); !slices.Equal(got, want) {
			t.Fatalf("knob %q with a runtime that enforces policies: %v, want %v", knob, got, want)
		}
	}
	m.SetFaults(fakehw.Faults{NVMLInitFails: true})
	if slices.Contains(CapabilitiesOf(m), CapNVML) {
		t.Fatal("nvml advertised while NVML cannot be initialized")
	}
}
