// Tests of the host reconciler on the fakehw root: signed units run and the
// inventory reads the reserved pages back; unsigned specs, bad units and
// failing units are refused or reported with their codes.
package hostconfig_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"bcd/internal/converge"
	"bcd/internal/fakehw"
	"bcd/internal/hostconfig"
	"bcd/internal/proto/agentv1"
)

const hugepages = `[Unit]
Description=bcd: reserve 5 huge pages of 2048 kB

[Service]
Type=oneshot
StandardInputText=5
ExecStart=/usr/bin/tee /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
`

var _ hostconfig.System = (*fakehw.Machine)(nil)

func spec(units ...*agentv1.HostUnit) *agentv1.NodeSpec {
	return &agentv1.NodeSpec{NodeId: "n", Generation: 2, Host: &agentv1.HostSection{Units: units}}
}

func unit(name, content string) *agentv1.HostUnit {
	return &agentv1.HostUnit{Name: name, Content: []byte(content)}
}

func machine(t *testing.T) *fakehw.Machine {
	m, err := fakehw.New(t.TempDir(), "41", fakehw.VariantL40S)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func read(t *testing.T, m *fakehw.Machine, rel string) string {
	data, err := os.ReadFile(filepath.Join(m.Root(), rel))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

func TestSignedUnitsRunAndTheInventoryReadsThePagesBack(t *testing.T) {
	m := machine(t)
	r := hostconfig.New(m)
	res, err := r.Reconcile(context.Background(), converge.Input{Spec: spec(unit("bcd-hugepages.service", hugepages),
		unit("bcd-modules.service", "[Service]\nExecStart=/usr/sbin/modprobe -a tun vhost_net\n")), Signed: true})
	if err != nil || res.State != agentv1.SectionState_SECTION_STATE_APPLIED {
		t.Fatalf("%v %+v", err, res)
	}
	if got := read(t, m, "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"); got != "5" {
		t.Fatalf("machine-wide %s", got)
	}
	for node, want := range []string{"3", "2"} {
		if got := read(t, m, filepath.Join("sys/devices/system/node", "node"+string(rune('0'+node)), "hugepages/hugepages-2048kB/nr_hugepages")); got != want {
			t.Fatalf("node %d: %s, want %s", node, got, want)
		}
	}
	if got := strings.Join(m.LoadedModules(), ","); got != "tun,vhost_net" {
		t.Fatalf("modules %s", got)
	}
	inv, _ := m.Inventory()
	if inv.System.GetHugepages_2Mi() != 5 || inv.System.GetNuma()[0].GetHugepages_2Mi() != 3 || inv.System.GetNuma()[1].GetHugepages_2Mi() != 2 {
		t.Fatalf("inventory %+v", inv.System)
	}
	if m.Generated().System.GetHugepages_2Mi() != 0 {
		t.Fatal("the generated inventory changed")
	}

	// A later spec without the modules unit removes it; the pages stay as the kernel holds them.
	res, _ = r.Reconcile(context.Background(), converge.Input{Spec: spec(unit("bcd-hugepages.service", hugepages)), Signed: true})
	if res.State != agentv1.SectionState_SECTION_STATE_APPLIED {
		t.Fatalf("%+v", res)
	}
	if _, err := os.Stat(filepath.Join(m.UnitDir(), "bcd-modules.service")); !os.IsNotExist(err) {
		t.Fatalf("the modules unit stayed: %v", err)
	}
}

func TestRefusalsAndFailures(t *testing.T) {
	m := machine(t)
	r := hostconfig.New(m)
	for _, c := range []struct {
		name   string
		in     converge.Input
		reason string
		msg    string
	}{
		{"unsigned", converge.Input{Spec: spec(unit("bcd-hugepages.service", hugepages))}, hostconfig.ReasonHostUnsigned, "no command root signed"},
		{"name", converge.Input{Spec: spec(unit("sshd.service", hugepages)), Signed: true}, hostconfig.ReasonUnitInvalid, "not a host unit name"},
		{"shell", converge.Input{Spec: spec(unit("bcd-x.service", "[Service]\nExecStart=/bin/sh -c 'reboot'\n")), Signed: true}, hostconfig.ReasonUnitInvalid, "shell syntax"},
		{"module", converge.Input{Spec: spec(unit("bcd-modules.service", "[Service]\nExecStart=/usr/sbin/modprobe -a tun nope\n"),
			unit("bcd-hugepages.service", hugepages)), Signed: true}, hostconfig.ReasonUnitFailed, "1 of 2 unit(s) failed: bcd-modules.service: modprobe: FATAL: Module nope not found"},
		{"file", converge.Input{Spec: spec(unit("bcd-x.service", "[Service]\nStandardInputText=1\nExecStart=/usr/bin/tee /etc/passwd\n")), Signed: true}, hostconfig.ReasonUnitFailed, "Permission denied"},
		{"program", converge.Input{Spec: spec(unit("bcd-x.service", "[Service]\nExecStart=/usr/bin/reboot\n")), Signed: true}, hostconfig.ReasonUnitFailed, "no such program"},
	} {
		res, err := r.Reconcile(context.Background(), c.in)
		if err != nil || res.State != agentv1.SectionState_SECTION_STATE_FAILED || res.Reason != c.reason || !strings.Contains(res.Message, c.msg) {
			t.Errorf("%s: %v %+v", c.name, err, res)
		}
	}
	// The unsigned and invalid specs installed nothing; the failing module did not keep the other unit from running.
	if got := read(t, m, "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"); got != "5" {
		t.Fatalf("machine-wide %s", got)
	}
	if _, err := os.Stat(filepath.Join(m.UnitDir(), "sshd.service")); !os.IsNotExist(err) {
		t.Fatal("an invalid unit was installed")
	}
}

// recorder is a System that keeps what it was handed.
type recorder struct {
	envelope *agentv1.Envelope
	units    []string
	started  []string
}

func (r *recorder) Install(_ context.Context, env *agentv1.Envelope, units []*agentv1.HostUnit) error {
	r.envelope = env
	for _, u := range units {
		r.units = append(r.units, u.GetName())
	}
	return nil
}

func (r *recorder) Start(_ context.Context, name string) error {
	r.started = append(r.started, name)
	return nil
}

func TestTheSystemGetsTheSignedEnvelope(t *testing.T) {
	rec := &recorder{}
	env := &agentv1.Envelope{PayloadType: "application/vnd.bcd.node-spec+protobuf", Payload: []byte("as it came")}
	res, err := hostconfig.New(rec).Reconcile(context.Background(), converge.Input{Spec: spec(unit("bcd-hugepages.service", hugepages)), Envelope: env, Signed: true})
	if err != nil || res.State != agentv1.SectionState_SECTION_STATE_APPLIED {
		t.Fatalf("%v %+v", err, res)
	}
	if rec.envelope != env || strings.Join(rec.units, ",") != "bcd-hugepages.service" || strings.Join(rec.started, ",") != "bcd-hugepages.service" {
		t.Fatalf("%+v", rec)
	}
}
