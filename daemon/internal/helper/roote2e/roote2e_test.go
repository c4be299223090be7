//go:build helpere2e

// TestHelperAsRoot: bcd helper as real root, run by
// `cargo xtask helper-e2e` inside private mount and network namespaces
// (scripts/helper-e2e-ns.sh: overlays of /etc, /usr/local and /var, a
// fresh /run), which it checks before it changes anything. It runs the
// install script rendered with --unprivileged --instance-bridges bcbr0 and
// the two release keys of testdata/release (threshold 2, sequence 5),
// starts the helper exactly as its unit's ExecStart= says, and sends every
// request as the bcd user from the installed slot (`bcd helper call`, a
// helpere2e build): the peer check, host units (host.apply, host.start
// against a fake systemctl, and the host build's reconciler through them,
// `bcd helper host-pass`), libvirt for real (its own libvirtd and
// virtlogd in these namespaces, TCG domains), real taps, an unprivileged
// bcd as a VPS host (vps_test.go), and self-update of the root-owned slots.
//
// Inputs (environment): BCD_HELPER_E2E_BCD (the helpere2e build of bcd),
// BCD_HELPER_E2E_SCRIPT (the rendered install script),
// BCD_HELPER_E2E_TESTDATA (the repository's testdata/) and, optionally,
// BCD_HELPER_E2E_LIBVIRT_CAPS (a directory kept across runs for libvirt's
// cache of QEMU's capabilities).
package roote2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"bcd/internal/helper"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/testlog"
	"bcd/internal/update"
	"bcd/internal/update/updatetest"
	"google.golang.org/protobuf/proto"
)

const slots = "/usr/local/lib/bcd"

// privateNamespaces refuses to go on unless this process is root in mount
// and network namespaces of its own.
func privateNamespaces(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("TestHelperAsRoot runs as root, in private namespaces: use `cargo xtask helper-e2e`")
	}
	// The host's namespaces: /proc/1's, or (where a process in another mount
	// namespace may not read them) those scripts/helper-e2e-ns.sh recorded
	// before unshare.
	host := strings.Fields(os.Getenv("BCD_HELPER_E2E_HOST_NS"))
	for _, ns := range []string{"mnt", "net"} {
		self, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			t.Fatalf("cannot read /proc/self/ns/%s: %v", ns, err)
		}
		init, err := os.Readlink("/proc/1/ns/" + ns)
		switch {
		case err == nil && self == init, slices.Contains(host, self):
			t.Fatalf("refusing to run in the host's %s namespace (%s): use `cargo xtask helper-e2e`, which runs this test under unshare --mount --net over overlays", ns, self)
		case err != nil && len(host) == 0:
			t.Fatalf("cannot tell the host's %s namespace (%v, and BCD_HELPER_E2E_HOST_NS is not set): refusing to run", ns, err)
		}
	}
	// The overlays of scripts/helper-e2e-ns.sh: /etc, /usr/local and /var must be overlay mounts.
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"/etc", "/usr/local", "/var", "/run"} {
		found := false
		for _, line := range strings.Split(string(mounts), "\n") {
			f := strings.Fields(line)
			if len(f) > 2 && f[1] == dir && (f[2] == "overlay" || (dir == "/run" && f[2] == "tmpfs")) {
				found = true
			}
		}
		if !found {
			t.Fatalf("%s is not an overlay (or /run a fresh tmpfs) in this namespace: refusing to change the host", dir)
		}
	}
}

func env(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: use `cargo xtask helper-e2e`", name)
	}
	return v
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// node calls the helper as the bcd user from a binary.
type node struct {
	t        *testing.T
	uid, gid uint32
	bin      string
}

// call sends op with args through `bcd helper call` and returns the response.
func (n *node) call(op string, args any) helper.Response {
	n.t.Helper()
	var in []byte
	if args != nil {
		var err error
		if in, err = json.Marshal(args); err != nil {
			n.t.Fatal(err)
		}
	}
	cmd := exec.Command(n.bin, "helper", "call", op)
	cmd.Stdin = bytes.NewReader(in)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: n.uid, Gid: n.gid}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		n.t.Fatalf("%s helper call %s: %v %s", n.bin, op, err, stderr.String())
	}
	resp := helper.Response{}
	if err := json.Unmarshal(out, &resp); err != nil {
		n.t.Fatalf("%s helper call %s: %q (%v) %s", n.bin, op, out, err, stderr.String())
	}
	return resp
}

func (n *node) ok(op string, args, result any) {
	n.t.Helper()
	resp := n.call(op, args)
	if !resp.OK {
		n.t.Fatalf("%s refused: %s", op, resp.Error)
	}
	if result != nil {
		if err := json.Unmarshal(resp.Result, result); err != nil {
			n.t.Fatal(err)
		}
	}
}

func (n *node) refused(op string, args any, code string) string {
	n.t.Helper()
	resp := n.call(op, args)
	if resp.OK || resp.Code != code {
		n.t.Fatalf("%s: %+v, want the refusal %s", op, resp, code)
	}
	return resp.Error
}

func owner(t *testing.T, path string) (uint32, os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Uid, fi.Mode()
}

func wantOwned(t *testing.T, path string, uid uint32, perm os.FileMode) {
	t.Helper()
	got, mode := owner(t, path)
	if got != uid || mode.Perm() != perm {
		t.Fatalf("%s: uid %d mode %v, want uid %d mode %v", path, got, mode.Perm(), uid, perm)
	}
}

func current(t *testing.T) string {
	t.Helper()
	target, err := os.Readlink(filepath.Join(slots, update.Entrypoint))
	if err != nil {
		t.Fatal(err)
	}
	return target
}

func TestHelperAsRoot(t *testing.T) {
	privateNamespaces(t)
	bcd := env(t, "BCD_HELPER_E2E_BCD")
	script := env(t, "BCD_HELPER_E2E_SCRIPT")
	testdata := env(t, "BCD_HELPER_E2E_TESTDATA")
	started := time.Now()
	run(t, "ip", "link", "set", "lo", "up")

	// 1. The install script's unprivileged mode.
	t.Log(strings.TrimSpace(run(t, "sh", script, bcd)))
	u, err := user.Lookup("bcd")
	if err != nil {
		t.Fatalf("the script made no bcd user: %v", err)
	}
	uid64, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid64, _ := strconv.ParseUint(u.Gid, 10, 32)
	uid, gid := uint32(uid64), uint32(gid64)
	if uid == 0 {
		t.Fatal("the bcd user is root")
	}
	wantOwned(t, slots, 0, 0o755)
	wantOwned(t, filepath.Join(slots, update.SlotA), 0, 0o755)
	if current(t) != update.SlotA {
		t.Fatalf("the entrypoint names %s", current(t))
	}
	installed, _ := os.ReadFile(bcd)
	if got, _ := os.ReadFile("/usr/local/bin/bcd"); !bytes.Equal(got, installed) {
		t.Fatal("/usr/local/bin/bcd is not the installed binary")
	}
	wantOwned(t, "/etc/bcd", uid, 0o750)
	wantOwned(t, "/etc/bcd/config.toml", uid, 0o640)
	wantOwned(t, "/var/lib/bcd", uid, 0o700)
	wantOwned(t, "/var/lib/bcd/update", uid, 0o700)
	wantOwned(t, helper.DefaultConfigPath, 0, 0o644)
	wantOwned(t, helper.HelperUnitPath, 0, 0o644)
	wantOwned(t, helper.NodeUnitPath, 0, 0o644)
	nodeUnit, _ := os.ReadFile(helper.NodeUnitPath)
	if !strings.Contains(string(nodeUnit), "User=bcd\n") {
		t.Fatalf("bcd.service does not run as bcd:\n%s", nodeUnit)
	}

	// The administrator trusts a command root for host units.
	interopRoot := pki.DeriveEd25519("bc-interop-v1", "command-root/0")
	rootPub, _ := pki.PublicKeyOf(interopRoot)
	if err := os.WriteFile(filepath.Join(helper.HelperRootsDir, "interop-command-root-0.pem"),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: rootPub.SPKI()}), 0o644); err != nil {
		t.Fatal(err)
	}

	// The bridges: bcbr0 is an instance bridge, br-mgmt is not.
	run(t, "ip", "link", "add", "bcbr0", "type", "bridge")
	run(t, "ip", "link", "add", "br-mgmt", "type", "bridge")
	// libvirt, for real: virtlogd and libvirtd of this namespace
	// (vps_test.go), which the helper's virsh reaches at qemu:///system.
	stopLibvirt := startLibvirt(t)
	defer stopLibvirt()
	fakebin := t.TempDir()
	// A fake systemctl: start runs the unit's ExecStart= (one command, no
	// shell) as systemctl start does a Type=oneshot unit's.
	systemctlLog := filepath.Join(fakebin, "systemctl.log")
	if err := os.WriteFile(filepath.Join(fakebin, "systemctl"), []byte(`#!/bin/sh
echo "$*" >> `+systemctlLog+`
if [ "$1" = start ]; then
  cmd=$(sed -n 's/^ExecStart=//p' "/etc/systemd/system/$2")
  $cmd || { echo "Job for $2 failed because the control process exited with error code." >&2; exit 1; }
fi
`), 0o755); err != nil {
		t.Fatal(err)
	}

	// 2. The helper, started the way its unit starts it.
	unit, _ := os.ReadFile(helper.HelperUnitPath)
	argv, err := helper.ExecStart(string(unit))
	if err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	h := exec.CommandContext(ctx, argv[0], argv[1:]...)
	h.Env = append(os.Environ(), "PATH="+fakebin+":"+os.Getenv("PATH"))
	h.Stdout, h.Stderr = logs, logs
	h.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	h.Cancel = func() error { return h.Process.Signal(syscall.SIGTERM) }
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			_ = h.Wait()
		}
	}
	defer stop()
	defer func() {
		if t.Failed() {
			t.Logf("the helper's log:\n%s", logs.String())
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "helper.serving") {
		if time.Now().After(deadline) || h.ProcessState != nil {
			t.Fatalf("the helper did not start:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	wantOwned(t, helper.DefaultSocket, 0, 0o660)
	if _, mode := owner(t, filepath.Dir(helper.DefaultSocket)); mode.Perm() != 0o750 {
		t.Fatalf("%s mode %v", filepath.Dir(helper.DefaultSocket), mode)
	}

	n := &node{t: t, uid: uid, gid: gid, bin: filepath.Join(slots, update.SlotA)}
	// Only the bcd user running an installed slot is answered.
	n.ok(helper.OpPing, nil, nil)
	if err := helper.Call(context.Background(), helper.DefaultSocket, helper.OpPing, nil, nil); !errors.Is(err, helper.CodePeer) {
		t.Fatalf("root's own call: %v, want %s", err, helper.CodePeer)
	}
	elsewhere := "/var/lib/bcd/bcd-copy" // the same bytes, the bcd user's, not a slot
	if err := os.WriteFile(elsewhere, installed, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(elsewhere, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	(&node{t: t, uid: uid, gid: gid, bin: elsewhere}).refused(helper.OpPing, nil, string(helper.CodePeer))

	t.Run("host units", func(t *testing.T) {
		n := &node{t: t, uid: uid, gid: gid, bin: n.bin}
		hugepages := &agentv1.HostUnit{Name: "bcd-hugepages.service", Content: []byte("[Service]\nType=oneshot\nExecStart=/bin/sh -c 'echo 64 > /proc/sys/vm/nr_hugepages'\n")}
		payload, _ := proto.Marshal(&agentv1.NodeSpec{NodeId: "node_e2e", Generation: 4, Host: &agentv1.HostSection{Units: []*agentv1.HostUnit{hugepages}}})
		signed, err := pki.SignEnvelope(rand.Reader, pki.PayloadTypeNodeSpec, payload, interopRoot)
		if err != nil {
			t.Fatal(err)
		}
		unsigned := &pki.Envelope{PayloadType: pki.PayloadTypeNodeSpec, Payload: payload, Signatures: []pki.Signature{}}
		tampered := &pki.Envelope{PayloadType: signed.PayloadType, Payload: append(append([]byte{}, payload...), 0x08, 0x09), Signatures: signed.Signatures}
		n.refused(helper.OpHostApply, map[string]json.RawMessage{"spec": unsigned.JSON()}, "dsse-unsigned")
		n.refused(helper.OpHostApply, map[string]json.RawMessage{"spec": tampered.JSON()}, "dsse-bad-signature")
		// Before the node joined, the helper knows no node id and applies nothing.
		n.refused(helper.OpHostApply, map[string]json.RawMessage{"spec": signed.JSON()}, string(helper.CodeNodeUnknown))
		// The join writes node_id into the node's config.toml (at the top:
		// below [update] it would be that table's).
		nodeConfig, err := os.ReadFile(helper.NodeConfigPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(helper.NodeConfigPath, append([]byte("node_id = \"node_e2e\"\n"), nodeConfig...), 0o640); err != nil {
			t.Fatal(err)
		}
		// Another node's spec, properly signed, at a huge generation.
		otherPayload, _ := proto.Marshal(&agentv1.NodeSpec{NodeId: "node_other", Generation: 1 << 40, Host: &agentv1.HostSection{Units: []*agentv1.HostUnit{hugepages}}})
		other, err := pki.SignEnvelope(rand.Reader, pki.PayloadTypeNodeSpec, otherPayload, interopRoot)
		if err != nil {
			t.Fatal(err)
		}
		n.refused(helper.OpHostApply, map[string]json.RawMessage{"spec": other.JSON()}, "spec-wrong-node")
		if _, err := os.Stat("/etc/systemd/system/bcd-hugepages.service"); !os.IsNotExist(err) {
			t.Fatal("a refused spec wrote its unit")
		}
		res := helper.HostResult{}
		n.ok(helper.OpHostApply, map[string]json.RawMessage{"spec": signed.JSON()}, &res)
		wantOwned(t, "/etc/systemd/system/bcd-hugepages.service", 0, 0o644)
		if got, _ := os.ReadFile("/etc/systemd/system/bcd-hugepages.service"); !bytes.Equal(got, hugepages.Content) {
			t.Fatalf("the unit holds %q", got)
		}
		// That first apply bound the host to node_e2e (root's record): the
		// node's config.toml naming another node afterwards is refused.
		if record, _ := os.ReadFile(filepath.Join(helper.HelperStateDir, "host-units.json")); !bytes.Contains(record, []byte(`"node_id":"node_e2e"`)) {
			t.Fatalf("host-units.json: %s", record)
		}
		joined, err := os.ReadFile(helper.NodeConfigPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(helper.NodeConfigPath, bytes.Replace(joined, []byte(`node_id = "node_e2e"`), []byte(`node_id = "node_other"`), 1), 0o640); err != nil {
			t.Fatal(err)
		}
		n.refused(helper.OpHostApply, map[string]json.RawMessage{"spec": other.JSON()}, string(helper.CodeNodeChanged))
		if err := os.WriteFile(helper.NodeConfigPath, joined, 0o640); err != nil {
			t.Fatal(err)
		}

		// host.start: only a unit of the last apply (the huge pages one is
		// not started here: the kernel's vm sysctls are not namespaced).
		n.refused(helper.OpHostStart, helper.HostStartArgs{Name: "bcd-other.service"}, string(helper.CodeUnitUnknown))
		n.refused(helper.OpHostStart, helper.HostStartArgs{Name: "ssh.service"}, string(helper.CodeUnitName))
		if _, err := os.Stat(systemctlLog); !os.IsNotExist(err) {
			t.Fatal("systemctl ran for a refused start")
		}

		// The host build's reconciler as the bcd user, through the helper
		// of config.toml's [update] helper_socket: the next generation's
		// units written, the dropped one removed, each started as root, a
		// failing one the section's reason.
		marker := &agentv1.HostUnit{Name: "bcd-marker.service", Content: []byte("[Service]\nType=oneshot\nExecStart=/usr/bin/touch /run/bcd-host-marker\n")}
		bad := &agentv1.HostUnit{Name: "bcd-bad.service", Content: []byte("[Service]\nType=oneshot\nExecStart=/bin/false\n")}
		next, _ := proto.Marshal(&agentv1.NodeSpec{NodeId: "node_e2e", Generation: 5, Host: &agentv1.HostSection{Units: []*agentv1.HostUnit{marker, bad}}})
		nextEnv, err := pki.SignEnvelope(rand.Reader, pki.PayloadTypeNodeSpec, next, interopRoot)
		if err != nil {
			t.Fatal(err)
		}
		got := n.passOf("host-pass", string(nextEnv.JSON()))
		msg, _ := got["message"].(string)
		if got["state"] != "SECTION_STATE_FAILED" || got["reason"] != "UnitFailed" || !strings.Contains(msg, "1 of 2 unit(s) failed: bcd-bad.service: helper-command: ") ||
			!strings.Contains(msg, "Job for bcd-bad.service failed") {
			t.Fatalf("host pass %v", got)
		}
		if uid, _ := owner(t, "/run/bcd-host-marker"); uid != 0 {
			t.Fatalf("the unit ran as uid %d, not root's", uid)
		}
		wantOwned(t, "/etc/systemd/system/bcd-marker.service", 0, 0o644)
		if _, err := os.Stat("/etc/systemd/system/bcd-hugepages.service"); !os.IsNotExist(err) {
			t.Fatal("the unit the spec dropped remains")
		}
		if calls, _ := os.ReadFile(systemctlLog); string(calls) != "start bcd-marker.service\nstart bcd-bad.service\n" {
			t.Fatalf("systemctl calls:\n%s", calls)
		}
		// A spec another key signed does not get past the helper.
		forged, err := pki.SignEnvelope(rand.Reader, pki.PayloadTypeNodeSpec, next, pki.DeriveEd25519("bc-interop-v1", "someone-else"))
		if err != nil {
			t.Fatal(err)
		}
		if got := n.passOf("host-pass", string(forged.JSON())); got["state"] != "SECTION_STATE_FAILED" || !strings.Contains(got["message"].(string), "dsse-unknown-key") {
			t.Fatalf("forged host pass %v", got)
		}
	})

	t.Run("libvirt", func(t *testing.T) {
		n := &node{t: t, uid: uid, gid: gid, bin: n.bin}
		msg := n.refused(helper.OpDomainDefine, helper.DomainArgs{ID: "vm1", VCPUs: 2, MemoryBytes: 1 << 30, NICs: []helper.NIC{{Bridge: "br-mgmt"}}}, string(helper.CodeBridge))
		if !strings.Contains(msg, `domain: bridge "br-mgmt" is not an instance network`) {
			t.Fatalf("refusal %q", msg)
		}
		if got := domains(t); len(got) != 0 {
			t.Fatalf("a refused domain is defined: %v", got)
		}
		vm := helper.DomainArgs{ID: "vm1", VCPUs: 2, MemoryBytes: 256 << 20, Accelerator: "tcg", NICs: []helper.NIC{{Bridge: "bcbr0", MAC: "52:54:00:00:00:01"}}}
		want := map[string]string{helper.OpDomainDefine: "shut off", helper.OpDomainStart: "running", helper.OpDomainDestroy: "shut off"}
		for _, op := range []string{helper.OpDomainDefine, helper.OpDomainStart, helper.OpDomainDestroy, helper.OpDomainUndefine} {
			n.ok(op, vm, nil)
			if w := want[op]; w != "" {
				if got := strings.TrimSpace(virsh(t, "domstate", "bcd-vm1")); got != w {
					t.Fatalf("after %s: %s, want %s", op, got, w)
				}
			}
		}
		if got := domains(t); len(got) != 0 {
			t.Fatalf("undefined, yet libvirt has %v", got)
		}
	})

	t.Run("cloud-hypervisor taps", func(t *testing.T) {
		n := &node{t: t, uid: uid, gid: gid, bin: n.bin}
		msg := n.refused(helper.OpChTaps, helper.DomainArgs{ID: "vm2", NICs: []helper.NIC{{Bridge: "bcbr0"}, {Bridge: "br-mgmt"}}}, string(helper.CodeBridge))
		if !strings.Contains(msg, `ch.taps: "br-mgmt" is not an instance bridge of this host ([helper] instance_bridges)`) {
			t.Fatalf("refusal %q", msg)
		}
		tap := helper.TapName("vm2", 0)
		if out, err := exec.Command("ip", "link", "show", tap).CombinedOutput(); err == nil {
			t.Fatalf("a refused NIC left a tap: %s", out)
		}
		res := helper.TapsResult{}
		n.ok(helper.OpChTaps, helper.DomainArgs{ID: "vm2", NICs: []helper.NIC{{Bridge: "bcbr0"}}}, &res)
		if len(res.Taps) != 1 || res.Taps[0] != tap {
			t.Fatalf("taps %v", res.Taps)
		}
		details := run(t, "ip", "-d", "link", "show", tap)
		for _, want := range []string{"master bcbr0", "tun type tap", "user bcd"} {
			if !strings.Contains(details, want) {
				t.Fatalf("the tap lacks %q:\n%s", want, details)
			}
		}
		n.ok(helper.OpChTapsDelete, helper.DomainArgs{ID: "vm2"}, nil)
		if out, err := exec.Command("ip", "link", "show", tap).CombinedOutput(); err == nil {
			t.Fatalf("the tap remains: %s", out)
		}
	})

	t.Run("vps host", func(t *testing.T) {
		vpsHost(t, &node{t: t, uid: uid, gid: gid, bin: n.bin})
	})

	t.Run("self-update", func(t *testing.T) {
		n := &node{t: t, uid: uid, gid: gid, bin: n.bin}
		rel := updatetest.LoadFile(t, filepath.Join(testdata, "release", "release.json"))
		staged := "/var/lib/bcd/update/bcd.staged"
		stage := func(data []byte, uid uint32) {
			t.Helper()
			os.Remove(staged)
			if err := os.WriteFile(staged, data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(staged, int(uid), int(gid)); err != nil {
				t.Fatal(err)
			}
		}
		manifest := map[string]json.RawMessage{"manifest": json.RawMessage(rel.Manifest)}
		swap := update.SwapRequest{CommandID: "cmd_upgrade", Previous: "0.1.0"}

		// prepare refuses a tampered manifest, another digest and a missing artifact.
		stage(rel.Artifact, uid)
		tampered := json.RawMessage(rel.Case(t, "release/tampered-manifest").Envelope)
		n.refused(helper.OpUpdatePrepare, map[string]json.RawMessage{"manifest": tampered}, "dsse-bad-signature")
		other := rel.Case(t, "release/another-digest").Artifact
		stage(other, uid)
		n.refused(helper.OpUpdatePrepare, manifest, "release-digest")
		stage(rel.Artifact, uid)
		sum := sha256.Sum256(rel.Artifact)
		noArtifact := rel.Sign(t, pki.Manifest{Version: "0.9.0", Sequence: 7, Artifacts: []pki.Artifact{{OS: "linux", Arch: "s390x",
			SHA256: hex.EncodeToString(sum[:]), Size: uint64(len(rel.Artifact)), URL: "http://127.0.0.1:7080/releases/0.9.0/bcd-linux-s390x"}}})
		n.refused(helper.OpUpdatePrepare, map[string]json.RawMessage{"manifest": noArtifact.JSON()}, "release-missing-artifact")

		// swap refuses nothing staged, a symlink, a root-owned file and other bytes, without moving current.
		n.ok(helper.OpUpdatePrepare, manifest, nil)
		os.Remove(staged)
		n.refused(helper.OpUpdateSwap, swap, string(update.CodeNothingStaged))
		if err := os.Symlink("/etc/shadow", staged); err != nil {
			t.Fatal(err)
		}
		os.Lchown(staged, int(uid), int(gid))
		n.refused(helper.OpUpdateSwap, swap, string(update.CodeStagedSymlink))
		stage(rel.Artifact, 0)
		n.refused(helper.OpUpdateSwap, swap, string(update.CodeStagedOwner))
		stage(other, uid)
		n.refused(helper.OpUpdateSwap, swap, string(update.CodeStagedBytes))
		if current(t) != update.SlotA {
			t.Fatalf("a refused swap moved current to %s", current(t))
		}

		// A good swap: the release in slot b, its sequence in upgrade.json.
		stage(rel.Artifact, uid)
		rec := update.Record{}
		n.ok(helper.OpUpdateSwap, swap, &rec)
		if current(t) != update.SlotB || rec.Slot != update.SlotB {
			t.Fatalf("current %s after the swap (%+v)", current(t), rec)
		}
		if got, _ := os.ReadFile(filepath.Join(slots, update.SlotB)); !bytes.Equal(got, rel.Artifact) {
			t.Fatalf("slot b holds %q", got)
		}
		onDisk := update.Record{}
		raw, _ := os.ReadFile(filepath.Join(slots, update.UpgradeFile))
		if err := json.Unmarshal(raw, &onDisk); err != nil || onDisk.Sequence != 7 || onDisk.Version != "0.9.0" {
			t.Fatalf("upgrade.json %s", raw)
		}
		// A second swap, and confirming another version, are refused.
		stage(rel.Artifact, uid)
		n.ok(helper.OpUpdatePrepare, manifest, nil)
		n.refused(helper.OpUpdateSwap, swap, string(update.CodePending))
		n.refused(helper.OpUpdateConfirm, map[string]string{"version": "0.9.1"}, string(update.CodeVersion))
		// rollback brings back the installed binary; settle records the failure.
		n.ok(helper.OpUpdateRollback, nil, nil)
		if got, _ := os.ReadFile(filepath.Join(slots, update.Entrypoint)); current(t) != update.SlotA || !bytes.Equal(got, installed) {
			t.Fatalf("after the rollback the entrypoint names %s", current(t))
		}
		n.ok(helper.OpUpdateSettle, map[string]string{"version": "0.9.0"}, nil)
		stage(rel.Artifact, uid)
		n.refused(helper.OpUpdatePrepare, manifest, string(update.CodeReleaseFailed))
		// Slots and records are root's, neither group- nor world-writable.
		entries, _ := os.ReadDir(slots)
		for _, e := range append([]os.DirEntry{nil}, entries...) {
			path := slots
			if e != nil {
				path = filepath.Join(slots, e.Name())
			}
			u, mode := owner(t, path)
			if u != 0 || (mode&os.ModeSymlink == 0 && mode.Perm()&0o022 != 0) {
				t.Fatalf("%s: uid %d mode %v", path, u, mode)
			}
		}
		for _, name := range []string{update.SlotA, update.SlotB, update.FailedFile} {
			if _, err := os.Stat(filepath.Join(slots, name)); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		if !strings.Contains(logs.String(), "update.swapped") {
			t.Fatal("the swap is not in the helper's log")
		}
	})

	stop()
	fmt.Printf("TestHelperAsRoot: every step in %s\n", time.Since(started).Round(time.Millisecond))
}
