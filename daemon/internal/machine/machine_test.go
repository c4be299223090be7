// Tests of inventory sections: deterministic bytes, lowercase hex SHA-256,
// the section order, and no gpus section without GPUs; and of the kinds a
// machine contributes (no node.reboot on a host build).

package machine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"bcd/internal/dispatch"
	"bcd/internal/proto/agentv1"
)

func TestSections(t *testing.T) {
	inv := &Inventory{
		System:  &agentv1.SystemInventory{Hostname: "h", CpuCores: 4},
		GPUs:    &agentv1.GpuInventory{DriverVersion: "1", Gpus: []*agentv1.Gpu{{Index: 0, Model: "X"}}},
		Network: &agentv1.NetworkInventory{Nics: []*agentv1.Nic{{Name: "eth0"}}},
	}
	secs, err := inv.Sections()
	if err != nil || len(secs) != 3 || secs[0].Name != SectionSystem || secs[1].Name != SectionGPUs || secs[2].Name != SectionNetwork {
		t.Fatalf("sections %v, %v", secs, err)
	}
	for _, s := range secs {
		sum := sha256.Sum256(s.Content)
		if s.Sha256 != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: sha256 %s", s.Name, s.Sha256)
		}
	}
	inv.GPUs = nil
	if secs, _ := inv.Sections(); len(secs) != 2 {
		t.Fatalf("%d sections without GPUs", len(secs))
	}
}

func TestTheHostDescribesItself(t *testing.T) {
	h := NewHost()
	inv, err := h.Inventory()
	if err != nil || inv.System.GetCpuCores() == 0 || inv.GPUs != nil {
		t.Fatalf("inventory %v, %v", inv, err)
	}
	if h.Hold([]byte(`{"hold_ms":5}`)) != 0 {
		t.Fatal("a host build honours hold_ms")
	}
}

func TestAHostBuildRunsNoReboot(t *testing.T) {
	var names []string
	for _, k := range NewHost().Kinds(KindEnv{}) {
		names = append(names, k.Name)
	}
	if strings.Join(names, ",") != KindDiag+","+KindLogs {
		t.Fatalf("host kinds %v", names)
	}
}

func TestRebootAsksTheAgentAndEndsTheProcess(t *testing.T) {
	asked := ""
	k := RebootKind(KindEnv{Reboot: func(id string) { asked = id }})
	if _, err := k.Run(context.Background(), dispatch.Call{ID: "cmd_1"}); !errors.Is(err, dispatch.ErrProcessEnding) || asked != "cmd_1" || !k.SelfTerminating {
		t.Fatalf("reboot: %v, asked %q", err, asked)
	}
}

func TestParsePSI(t *testing.T) {
	for text, want := range map[string]uint32{
		"some avg10=80.55 avg60=1.00 avg300=0.00 total=9\nfull avg10=3.00 avg60=0.00 avg300=0.00 total=1\n": 80,
		"full avg10=90.00 avg60=0 avg300=0 total=0\n":                                                       0,
		"some avg10=nope\n": 0,
		"":                  0,
	} {
		if got := ParsePSI(text); got != want {
			t.Errorf("%q: %d, want %d", text, got, want)
		}
	}
}
