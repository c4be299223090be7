//go:build helpere2e

// The VPS host path of TestHelperAsRoot, with libvirt for real: this
// namespace's own virtlogd and libvirtd (started here, as root, with the
// overlays' /etc/libvirt and /var/lib/libvirt and the fresh /run; stopped
// at the end), which the helper's virsh reaches. The unprivileged bcd (the
// bcd user, from the installed slot) runs the instances reconciler over
// its host libvirt-kvm runtime (`bcd helper vps-pass`), which defines and
// starts an instance through the helper's domain and tap operations as
// real root: a real tap on bcbr0 guarded on the instance network (its nft
// table), the helper's domain XML (which virt-xml-validate accepts when it
// is installed) with a qcow2 overlay of root's over the node's base image
// (bound read-only, its bytes unchanged), the seed disk, a volume
// bind-mounted at root's path; the domain runs under QEMU (TCG: it boots
// no OS, the firmware finds nothing to boot). Then it deletes it, leaving
// no domain, tap, guard, overlay, seed, bound disk or volume behind.

package roote2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"bcd/internal/helper"
)

// startLibvirt starts virtlogd and libvirtd in these namespaces (their
// configuration the overlay's: QEMU as root without dynamic ownership, so
// the node's files keep their owner) and returns what stops them.
func startLibvirt(t *testing.T) func() {
	t.Helper()
	conf, err := os.OpenFile("/etc/libvirt/qemu.conf", os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("libvirt's qemu.conf (libvirt-daemon-system): %v", err)
	}
	_, err = conf.WriteString("\n# TestHelperAsRoot\nuser = \"root\"\ngroup = \"root\"\ndynamic_ownership = 0\n")
	conf.Close()
	if err != nil {
		t.Fatal(err)
	}
	autostart, _ := filepath.Glob("/etc/libvirt/qemu/networks/autostart/*.xml")
	for _, a := range autostart {
		os.Remove(a)
	}
	// libvirt's cache of QEMU's capabilities, kept across runs when xtask
	// names one (probing QEMU takes libvirtd about 8 s); libvirtd on CPU 0,
	// as the cache is checked against the CPUID of the CPU it runs on.
	if caps := os.Getenv("BCD_HELPER_E2E_LIBVIRT_CAPS"); caps != "" {
		dir := "/var/cache/libvirt/qemu/capabilities"
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		run(t, "mount", "--bind", caps, dir)
	}
	run(t, "virtlogd", "-d")
	run(t, "taskset", "-c", "0", "libvirtd", "-d")
	deadline := time.Now().Add(20 * time.Second)
	for exec.Command("virsh", "-c", "qemu:///system", "version").Run() != nil {
		if time.Now().After(deadline) {
			t.Fatal("libvirtd did not answer within 20 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return func() {
		for _, d := range domains(t) {
			_ = exec.Command("virsh", "-c", "qemu:///system", "destroy", d).Run()
			_ = exec.Command("virsh", "-c", "qemu:///system", "undefine", d).Run()
		}
		for _, pidfile := range []string{"/run/libvirtd.pid", "/run/virtlogd.pid"} {
			data, err := os.ReadFile(pidfile)
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && perr == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGTERM)
			}
		}
	}
}

// virsh runs virsh against this namespace's libvirtd.
func virsh(t *testing.T, args ...string) string {
	t.Helper()
	return run(t, "virsh", append([]string{"-c", "qemu:///system"}, args...)...)
}

// domains are the domains libvirt has.
func domains(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(virsh(t, "list", "--all", "--name"), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// pass runs one reconciler pass of spec (protobuf JSON) as the bcd user.
func (n *node) pass(spec string) map[string]any {
	n.t.Helper()
	return n.passOf("vps-pass", spec)
}

// passOf runs `bcd helper <sub> --config /etc/bcd/config.toml` on input as
// the bcd user and decodes what it prints.
func (n *node) passOf(sub, input string) map[string]any {
	n.t.Helper()
	cmd := exec.Command(n.bin, "helper", sub, "--config", "/etc/bcd/config.toml")
	cmd.Stdin = strings.NewReader(input)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: n.uid, Gid: n.gid}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		n.t.Fatalf("bcd helper %s: %v\n%s", sub, err, stderr.String())
	}
	res := map[string]any{}
	if err := json.Unmarshal(out, &res); err != nil {
		n.t.Fatalf("%q: %v", out, err)
	}
	return res
}

// baseImage writes a base image into the node's image store, the bcd
// user's, and returns its digest.
func baseImage(t *testing.T, n *node) string {
	t.Helper()
	data := bytes.Repeat([]byte("a base disk "), 1<<16)
	sum := sha256.Sum256(data)
	path := filepath.Join("/var/lib/bcd/images", hex.EncodeToString(sum[:])+".raw")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Dir(path), path} {
		if err := os.Chown(p, int(n.uid), int(n.gid)); err != nil {
			t.Fatal(err)
		}
	}
	return "sha256:" + hex.EncodeToString(sum[:])
}

func vpsHost(t *testing.T, n *node) {
	f, err := os.OpenFile("/etc/bcd/config.toml", os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// TCG: this machine's KVM does not run guests (nested).
	_, err = f.WriteString("\n[instances]\nruntimes = [\"libvirt-kvm\"]\naccelerator = \"tcg\"\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	digest := baseImage(t, n)
	base := filepath.Join("/var/lib/bcd/images", strings.TrimPrefix(digest, "sha256:")+".raw")
	spec := `{"nodeId": "node_e2e", "generation": "1", "instances": {
	  "instances": [{"id": "vm3", "runtime": "libvirt-kvm", "vcpus": 1, "memoryBytes": "268435456", "state": "running",
	    "userData": "I2Nsb3VkLWNvbmZpZwo=", "image": "` + digest + `", "nics": [{"bridge": "bcbr0", "mac": "52:54:00:00:00:03"}],
	    "volumes": [{"volumeId": "data", "serial": "data"}]}],
	  "volumes": [{"id": "data", "sizeBytes": "1073741824"}]}}`
	res := n.pass(spec)
	if res["state"] != "SECTION_STATE_APPLIED" || !strings.Contains(string(must(json.Marshal(res["report"]))), `"state":"running"`) {
		t.Fatalf("the first pass: %v", res)
	}
	if got := strings.TrimSpace(virsh(t, "domstate", "bcd-vm3")); got != "running" {
		t.Fatalf("bcd-vm3 is %s", got)
	}
	tap := helper.TapName("vm3", 0)
	details := run(t, "ip", "-d", "link", "show", tap)
	for _, want := range []string{"master bcbr0", "tun type tap", "user bcd"} {
		if !strings.Contains(details, want) {
			t.Fatalf("the tap lacks %q:\n%s", want, details)
		}
	}
	guard := run(t, "nft", "list", "table", "bridge", "bcd_"+tap)
	if !strings.Contains(guard, "ether saddr != 52:54:00:00:00:03 drop") || !strings.Contains(guard, "ip saddr != 169.254.") {
		t.Fatalf("the tap's guard:\n%s", guard)
	}
	xml := "/var/lib/bcd-helper/domains/bcd-vm3.xml"
	// The disks are the node's volume and base, checked and bound at root's paths.
	disk, boundBase, overlay := "/var/lib/bcd-helper/disks/bcd-vm3/vda", "/var/lib/bcd-helper/disks/bcd-vm3/base", "/var/lib/bcd-helper/overlays/bcd-vm3.qcow2"
	data, err := os.ReadFile(xml)
	for _, want := range []string{`<target dev="` + tap + `" managed="no">`, `<source file="` + disk + `">`, `<source file="` + overlay + `">`,
		`<source file="` + boundBase + `">`, `<source file="/var/lib/bcd-helper/seeds/bcd-vm3.img">`, `<domain type="qemu">`} {
		if err != nil || !strings.Contains(string(data), want) {
			t.Fatalf("the domain XML lacks %s: %v\n%s", want, err, data)
		}
	}
	if strings.Contains(string(data), "/var/lib/bcd/") {
		t.Fatalf("the domain XML names the node's paths:\n%s", data)
	}
	live := virsh(t, "dumpxml", "bcd-vm3")
	if !strings.Contains(live, "<backingStore type='file' index=") || !strings.Contains(live, boundBase) {
		t.Fatalf("the running domain's disk is not the overlay over the base:\n%s", live)
	}
	var bound, volume syscall.Stat_t
	if err := syscall.Stat(disk, &bound); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat("/var/lib/bcd/volumes/data.raw", &volume); err != nil {
		t.Fatal(err)
	}
	if bound.Ino != volume.Ino || bound.Dev != volume.Dev || bound.Uid != n.uid {
		t.Fatalf("%s is not the volume bound (inode %d of uid %d, the volume's %d)", disk, bound.Ino, bound.Uid, volume.Ino)
	}
	if err := os.WriteFile(boundBase, []byte("x"), 0o600); err == nil {
		t.Fatal("the base is bound writable")
	}
	if validate, err := exec.LookPath("virt-xml-validate"); err == nil {
		if out, err := exec.Command(validate, xml, "domain").CombinedOutput(); err != nil {
			t.Fatalf("virt-xml-validate refuses the helper's XML: %v\n%s", err, out)
		}
	}
	seed := "/var/lib/bcd/instances/seeds/vm3"
	for _, p := range []string{seed + "/user-data", seed + "/meta-data", "/var/lib/bcd/volumes/data.raw", "/var/lib/bcd/instances/libvirt-kvm/vm3.json"} {
		if uid, _ := owner(t, p); uid != n.uid {
			t.Fatalf("%s is uid %d's, not bcd's", p, uid)
		}
	}

	res = n.pass(`{"nodeId": "node_e2e", "generation": "2", "instances": {}}`)
	if res["state"] != "SECTION_STATE_APPLIED" {
		t.Fatalf("the second pass: %v", res)
	}
	if got := domains(t); len(got) != 0 {
		t.Fatalf("libvirt keeps %v", got)
	}
	if out, err := exec.Command("ip", "link", "show", tap).CombinedOutput(); err == nil {
		t.Fatalf("the tap remains: %s", out)
	}
	if out, err := exec.Command("nft", "list", "table", "bridge", "bcd_"+tap).CombinedOutput(); err == nil {
		t.Fatalf("the guard remains: %s", out)
	}
	for _, p := range []string{xml, seed, overlay, "/var/lib/bcd-helper/seeds/bcd-vm3.img", "/var/lib/bcd/volumes/data.raw",
		"/var/lib/bcd/instances/libvirt-kvm/vm3.json", filepath.Dir(disk)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s remains (%v)", p, err)
		}
	}
	after, _ := os.ReadFile(base)
	if sum := sha256.Sum256(after); "sha256:"+hex.EncodeToString(sum[:]) != digest {
		t.Fatal("the base image was written")
	}
}

func must(data []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return data
}
