// Tests of fakehw: deterministic inventory sections, the variants' shapes,
// the boot id and its reboot, the execution counters, the starts and the console
// shells' place and counter.

package fakehw

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"bcd/internal/dispatch"
	"bcd/internal/machine"
	"bcd/internal/tunnel"
)

func sections(t *testing.T, seed, variant string) map[string][]byte {
	t.Helper()
	inv, err := GenerateInventory(seed, variant)
	if err != nil {
		t.Fatal(err)
	}
	secs, err := inv.Sections()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, s := range secs {
		out[s.Name] = s.Content
	}
	return out
}

func TestTheSameSeedGivesTheSameBytes(t *testing.T) {
	for _, v := range Variants {
		a, b := sections(t, "41", v), sections(t, "41", v)
		for name := range a {
			if !bytes.Equal(a[name], b[name]) {
				t.Errorf("%s/%s differs between two runs", v, name)
			}
		}
		c := sections(t, "42", v)
		if bytes.Equal(a[machine.SectionSystem], c[machine.SectionSystem]) {
			t.Errorf("%s: seeds 41 and 42 give the same system section", v)
		}
	}
}

func TestTheVariants(t *testing.T) {
	for _, tc := range []struct {
		variant string
		gpus    int
		model   string
	}{
		{VariantHGXH100, 8, "NVIDIA H100 80GB HBM3"},
		{VariantHGXH100GPUMissing, 7, "NVIDIA H100 80GB HBM3"},
		{VariantL40S, 4, "NVIDIA L40S"},
		{VariantCPU, 0, ""},
	} {
		inv, err := GenerateInventory("41", tc.variant)
		if err != nil {
			t.Fatal(err)
		}
		secs, _ := inv.Sections()
		if tc.gpus == 0 {
			if inv.GPUs != nil || len(secs) != 2 {
				t.Errorf("%s: has a gpus section", tc.variant)
			}
			continue
		}
		if len(inv.GPUs.Gpus) != tc.gpus || len(secs) != 3 || secs[1].Name != machine.SectionGPUs {
			t.Errorf("%s: %d GPUs, %d sections", tc.variant, len(inv.GPUs.Gpus), len(secs))
		}
		for i, g := range inv.GPUs.Gpus {
			if g.Index != uint32(i) || g.Model != tc.model {
				t.Errorf("%s: GPU %d is %v", tc.variant, i, g)
			}
		}
	}
	if _, err := GenerateInventory("41", "a100"); !errors.Is(err, ErrUnknownVariant) {
		t.Fatalf("unknown variant: %v", err)
	}
}

func TestDiagCountsVisibleGPUs(t *testing.T) {
	m, err := New(t.TempDir(), "41", VariantHGXH100GPUMissing)
	if err != nil {
		t.Fatal(err)
	}
	d, err := m.Diag(context.Background())
	if err != nil || d.GPUs != 7 || d.Healthy != 7 || d.Driver != driverVersion {
		t.Fatalf("diag %+v, %v", d, err)
	}
}

func TestTheBootIDSurvivesARestartAndARebootChangesIt(t *testing.T) {
	dir := t.TempDir()
	m, err := New(dir, "41", VariantHGXH100)
	if err != nil {
		t.Fatal(err)
	}
	first := m.BootID()
	marker := filepath.Join(m.Root(), "run", "marker")
	os.WriteFile(marker, []byte("x"), 0o644)
	again, _ := New(dir, "41", VariantHGXH100)
	if again.BootID() != first || first == "" {
		t.Fatalf("boot id %q, then %q", first, again.BootID())
	}
	if err := again.Reboot(); err != nil {
		t.Fatal(err)
	}
	after, _ := New(dir, "41", VariantHGXH100)
	if after.BootID() == first {
		t.Fatal("a reboot kept the boot id")
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a reboot kept /run")
	}
}

func TestStartsAreAppendedAndABrokenMachineCountsEachExecutionTwice(t *testing.T) {
	m, _ := New(t.TempDir(), "41", VariantCPU)
	var _ machine.Starts = m
	for i := 0; i < 2; i++ {
		if err := m.Started(); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(m.StartsPath())
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Fields(string(data)); len(lines) != 2 || lines[0] > lines[1] {
		t.Fatalf("starts %q", data)
	}
	if err := m.Reboot(); err != nil {
		t.Fatal(err)
	}
	boots, err := os.ReadFile(m.BootsPath())
	if err != nil || len(strings.Fields(string(boots))) != 2 {
		t.Fatalf("boots %q %v: the first boot and the reboot", boots, err)
	}
	m.SetFaults(Faults{ExecuteTwice: true})
	if err := m.Executed("cmd_1"); err != nil {
		t.Fatal(err)
	}
	if n, _ := m.Executions("cmd_1"); n != 2 {
		t.Fatalf("%d executions counted by the broken machine", n)
	}
}

func TestExecutionsAreCounted(t *testing.T) {
	m, _ := New(t.TempDir(), "41", VariantCPU)
	for i := 0; i < 2; i++ {
		if err := m.Executed("cmd_1"); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := m.Executions("cmd_1"); n != 2 {
		t.Fatalf("%d executions", n)
	}
	if n, _ := m.Executions("cmd_2"); n != 0 {
		t.Fatalf("%d executions of a command that never ran", n)
	}
	if m.Executed("../x") == nil {
		t.Fatal("a command id with a slash named a file")
	}
	if m.Hold([]byte(`{"hold_ms":1500}`)).Milliseconds() != 1500 || m.Hold(nil) != 0 {
		t.Fatal("hold_ms")
	}
}

func TestConsoleShellsRunInTheFakeRootAndAreCounted(t *testing.T) {
	m, _ := New(t.TempDir(), "41", VariantCPU)
	var place tunnel.Place = m
	if place.ShellDir() != m.Root() {
		t.Fatalf("shells run in %s, not the fake root %s", place.ShellDir(), m.Root())
	}
	if n, _ := m.ShellsStarted(); n != 0 {
		t.Fatalf("%d shells before any console", n)
	}
	for i := 0; i < 2; i++ {
		if err := place.ShellStarted(); err != nil {
			t.Fatal(err)
		}
	}
	again, _ := New(filepath.Dir(m.Root()), "41", VariantCPU)
	if n, _ := again.ShellsStarted(); n != 2 {
		t.Fatalf("%d shells counted after a restart, want 2", n)
	}
}

func TestTheFailureKnobs(t *testing.T) {
	env := map[string]string{EnvFailGPUs: "5,1,5", EnvLogsUploadFails: "1", EnvCDIWriteFailures: "2", EnvGPUReset: "1", EnvDiagError: "x"}
	f, bad := FaultsFromEnv(func(k string) string { return env[k] })
	if len(bad) != 1 || bad[0] != EnvDiagError || f.CDIWriteFailures != 2 || !f.GPUReset || !f.LogsUploadFails {
		t.Fatalf("%+v %v", f, bad)
	}
	m, err := New(t.TempDir(), "41", VariantHGXH100)
	if err != nil {
		t.Fatal(err)
	}
	m.SetFaults(f)
	d, err := m.Diag(context.Background())
	if err != nil || d.Healthy != 6 || len(d.Failing) != 2 || d.Failing[0] != 1 || d.Failing[1] != 5 {
		t.Fatalf("%+v %v", d, err)
	}
	if _, err := m.CollectLogs(context.Background()); err == nil || !strings.HasPrefix(err.Error(), "logs-upload: ") {
		t.Fatalf("logs: %v", err)
	}
	for i, want := range []bool{true, true, false} {
		if got := m.CDIWriteFault() != nil; got != want {
			t.Fatalf("CDI write %d failed %v", i, got)
		}
	}
	var reset *dispatch.Kind
	for _, k := range m.Kinds(machine.KindEnv{}) {
		if k.Name == KindGPUReset {
			reset = &k
		}
	}
	if reset == nil || reset.RetrySafe {
		t.Fatalf("fakeGpuReset %+v", reset)
	}
	if out, err := reset.Run(context.Background(), dispatch.Call{ID: "c", Params: []byte(`{"gpu":3}`)}); err != nil || string(out) != `{"gpu":3,"resets":1}` || m.GPUResets(3) != 1 {
		t.Fatalf("%s %v", out, err)
	}
	m.SetFaults(Faults{NVMLInitFails: true})
	if _, err := m.Diag(context.Background()); err == nil || !strings.HasPrefix(err.Error(), "nvml-init: ") {
		t.Fatalf("nvml: %v", err)
	}
}

func TestMkdirTreeMakesTheTreeOnceAndRefusesAFileInTheWay(t *testing.T) {
	root := filepath.Join(t.TempDir(), "a", "root")
	dirs := []string{"x", "x/y", "z"}
	for range 2 { // a second time finds everything there
		if err := mkdirTree(root, dirs); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range dirs {
		if fi, err := os.Stat(filepath.Join(root, d)); err != nil || !fi.IsDir() {
			t.Fatalf("%s: %v", d, err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "w"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := mkdirTree(root, []string{"w"}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("a file where a directory goes: %v", err)
	}
}
