// Tests of an instance's network policy in the reconciler: one that does
// not parse fails the instance InstanceInvalid; one on a runtime that does
// not enforce it (fakehw's) fails it PlanUnsupported and defines nothing;
// one on a runtime that does reaches its domain, and a changed policy
// defines the domain again, powered off, and starts it.

package instances

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"bcd/internal/converge"
	"bcd/internal/proto/agentv1"
	"bcd/internal/runtime"
)

// enforcer is an in-memory runtime that enforces network policies.
type enforcer struct {
	domains map[string]runtime.Domain
	fps     map[string]string
	running map[string]bool
	defines int
	calls   []string
}

func newEnforcer() *enforcer {
	return &enforcer{domains: map[string]runtime.Domain{}, fps: map[string]string{}, running: map[string]bool{}}
}

func (e *enforcer) Name() string                { return runtime.NameCloudHypervisor }
func (e *enforcer) Version() string             { return "test" }
func (e *enforcer) EnforcesNetworkPolicy() bool { return true }
func (e *enforcer) Define(_ context.Context, d *runtime.Domain) error {
	if e.running[d.ID] {
		return errors.New("defined while running: its taps would be made anew under it")
	}
	e.domains[d.ID], e.fps[d.ID] = *d, d.Fingerprint()
	e.defines++
	e.calls = append(e.calls, "define")
	return nil
}
func (e *enforcer) Start(_ context.Context, id string) error {
	e.running[id] = true
	e.calls = append(e.calls, "start")
	return nil
}
func (e *enforcer) Stop(_ context.Context, id string) error {
	e.running[id] = false
	e.calls = append(e.calls, "stop")
	return nil
}
func (e *enforcer) Destroy(_ context.Context, id string) error {
	delete(e.domains, id)
	delete(e.fps, id)
	delete(e.running, id)
	return nil
}
func (e *enforcer) Inspect(_ context.Context, id string) (runtime.State, string, error) {
	switch {
	case e.fps[id] == "":
		return runtime.Absent, "", nil
	case e.running[id]:
		return runtime.Running, e.fps[id], nil
	}
	return runtime.Defined, e.fps[id], nil
}
func (e *enforcer) List(context.Context) ([]string, error) {
	var ids []string
	for id := range e.domains {
		ids = append(ids, id)
	}
	return ids, nil
}

func withPolicy(inst *agentv1.InstanceSpec, rules ...*agentv1.NetworkRule) *agentv1.InstanceSpec {
	inst.NetworkPolicy = &agentv1.NetworkPolicy{Egress: rules}
	return inst
}

func TestAPolicyOnARuntimeThatDoesNotEnforceItFailsTheInstance(t *testing.T) {
	g := newRig(t)
	if g.r.EnforcesNetworkPolicy() {
		t.Fatal("fakehw's runtime enforces policies")
	}
	https := &agentv1.NetworkRule{Protocol: "tcp", Cidr: "0.0.0.0/0", PortMin: 443, PortMax: 443}
	res := g.pass(section(withPolicy(vm("vm1", 1, 1), https), vm("ok", 1, 1)))
	st := g.status("vm1")
	want := "PlanUnsupported: network_policy: runtime libvirt-kvm does not enforce a network policy on this host"
	if res.State != agentv1.SectionState_SECTION_STATE_FAILED || res.Reason != ReasonInstanceFailed || st.GetState() != StateFailed || st.GetMessage() != want {
		t.Fatalf("%+v\n%v", res, st)
	}
	if rec, _ := g.rt.Read("vm1"); rec != nil || g.status("ok").GetState() != StateRunning {
		t.Fatalf("vm1 was defined (%+v), or the other did not start", rec)
	}
	// The runtime refuses it by itself too, and says why in its .error.
	d := &runtime.Domain{ID: "vm2", VCPUs: 1, MemoryBytes: 1 << 30, NetworkPolicy: &runtime.NetworkPolicy{}}
	if err := g.rt.Define(context.Background(), d); !errors.Is(err, runtime.ErrUnsupported) || !strings.Contains(err.Error(), "network_policy: ") {
		t.Fatalf("%v", err)
	}
	if data, _ := os.ReadFile(g.rt.ErrorPath("vm2")); !strings.Contains(string(data), "does not enforce a network policy") {
		t.Fatalf("the .error: %q", data)
	}
	// Without it, the instance runs.
	g.pass(section(vm("vm1", 1, 1)))
	if g.status("vm1").GetState() != StateRunning {
		t.Fatalf("%v", g.status("vm1"))
	}
}

func TestAPolicyThatDoesNotParseFailsTheInstanceInvalid(t *testing.T) {
	g := newRig(t)
	for _, c := range []struct {
		rule *agentv1.NetworkRule
		want string
	}{
		{&agentv1.NetworkRule{Protocol: "tcp; flush ruleset", Cidr: "10.0.0.0/8", PortMin: 1, PortMax: 1}, `network_policy: egress rule 1: protocol "tcp; flush ruleset"`},
		{&agentv1.NetworkRule{Protocol: "tcp", Cidr: "fd00::/8", PortMin: 1, PortMax: 1}, "egress rule 1: cidr \"fd00::/8\" is not IPv4"},
		{&agentv1.NetworkRule{Protocol: "udp", Cidr: "10.0.0.1/8", PortMin: 53, PortMax: 53}, "has address bits beyond its prefix"},
	} {
		ok := &agentv1.NetworkRule{Protocol: "icmp", Cidr: "0.0.0.0/0"}
		res := g.pass(section(withPolicy(vm("vm1", 1, 1), ok, c.rule)))
		st := g.status("vm1")
		if res.State != agentv1.SectionState_SECTION_STATE_FAILED || st.GetState() != StateFailed ||
			!strings.HasPrefix(st.GetMessage(), "InstanceInvalid: instance vm1: ") || !strings.Contains(st.GetMessage(), c.want) {
			t.Fatalf("%+v\n%v\nwant %q", res, st, c.want)
		}
	}
}

func TestAPolicyReachesAnEnforcingRuntimeAndAChangeRedefines(t *testing.T) {
	g := newRig(t)
	e := newEnforcer()
	r, err := New(Config{Runtimes: []runtime.Runtime{g.rt, e},
		// Room for the one instance only: its restart must not count it twice.
		Capacity: func() (Capacity, error) { return Capacity{VCPUs: 1, MemoryBytes: 1 << 30}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if !r.EnforcesNetworkPolicy() {
		t.Fatal("a reconciler with an enforcing runtime does not say so")
	}
	g.r = r
	inst := func(rules ...*agentv1.NetworkRule) *agentv1.InstanceSpec {
		v := withPolicy(vm("vm1", 1, 1), rules...)
		v.Runtime = runtime.NameCloudHypervisor
		v.NetworkPolicy.Ingress = []*agentv1.NetworkRule{{Protocol: "tcp", Cidr: "10.0.0.0/8", PortMin: 22, PortMax: 22}}
		return v
	}
	dns := &agentv1.NetworkRule{Protocol: "udp", Cidr: "10.1.2.3/32", PortMin: 53, PortMax: 53}
	res := g.pass(section(inst(dns)))
	if res.State != agentv1.SectionState_SECTION_STATE_APPLIED || res.Reason != converge.ReasonApplied || g.status("vm1").GetState() != StateRunning {
		t.Fatalf("%+v %v", res, g.status("vm1"))
	}
	want := runtime.NetworkPolicy{Ingress: []runtime.NetworkRule{{Protocol: "tcp", CIDR: "10.0.0.0/8", PortMin: 22, PortMax: 22}},
		Egress: []runtime.NetworkRule{{Protocol: "udp", CIDR: "10.1.2.3/32", PortMin: 53, PortMax: 53}}}
	if p := e.domains["vm1"].NetworkPolicy; p == nil || len(p.Ingress) != 1 || p.Ingress[0] != want.Ingress[0] || len(p.Egress) != 1 || p.Egress[0] != want.Egress[0] {
		t.Fatalf("the runtime got %+v", p)
	}
	g.pass(section(inst(dns)))
	if e.defines != 1 {
		t.Fatalf("the same policy defined the domain %d times", e.defines)
	}
	dns.PortMax = 54
	g.pass(section(inst(dns)))
	if e.defines != 2 || e.domains["vm1"].NetworkPolicy.Egress[0].PortMax != 54 {
		t.Fatalf("a changed policy: %d defines, %+v", e.defines, e.domains["vm1"].NetworkPolicy)
	}
	// The running guest was powered off, defined again and started.
	if got := strings.Join(e.calls, ","); got != "define,start,stop,define,start" || g.status("vm1").GetState() != StateRunning {
		t.Fatalf("calls %s, status %v", got, g.status("vm1"))
	}
	// No rules at all is a policy too (nothing but ARP and the metadata
	// endpoint), and not the same as none.
	empty := inst()
	empty.NetworkPolicy = &agentv1.NetworkPolicy{}
	g.pass(section(empty))
	if p := e.domains["vm1"].NetworkPolicy; p == nil || len(p.Ingress)+len(p.Egress) != 0 || e.defines != 3 {
		t.Fatalf("an empty policy: %+v, %d defines", p, e.defines)
	}
	empty.NetworkPolicy = nil
	g.pass(section(empty))
	if e.domains["vm1"].NetworkPolicy != nil || e.defines != 4 {
		t.Fatalf("no policy: %+v, %d defines", e.domains["vm1"].NetworkPolicy, e.defines)
	}
}
