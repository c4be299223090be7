//go:build helpere2e

// The VPS host path of TestHelperAsRoot: the unprivileged bcd (the bcd
// user, from the installed slot) runs the instances reconciler over its
// host libvirt-kvm runtime (`bcd helper vps-pass`), which defines and
// starts an instance through the helper's domain and tap operations as
// real root (a real tap on bcbr0, the helper's domain XML, which
// virt-xml-validate accepts when it is installed, the seed and a volume,
// bind-mounted at root's path the XML names), then deletes it, leaving no
// tap, domain file, bound disk, seed or volume behind.

package roote2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"bcd/internal/helper"
)

// fakeVirsh writes a virsh that logs its arguments and keeps each
// domain's state in files beside it: define, start, destroy, undefine,
// domstate.
func fakeVirsh(t *testing.T, dir, log string) {
	t.Helper()
	state := filepath.Join(dir, "virsh-state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	script := `#!/bin/sh
echo "$*" >> ` + log + `
s=` + state + `
case "$1" in
define) n=$(basename "$2" .xml); cp "$2" "$s/$n.xml"; echo "shut off" > "$s/$n" ;;
start) [ -f "$s/$2" ] || { echo "error: failed to get domain '$2'" >&2; exit 1; }; echo running > "$s/$2" ;;
destroy) [ -f "$s/$2" ] || exit 1; echo "shut off" > "$s/$2" ;;
undefine) rm -f "$s/$2" "$s/$2.xml" ;;
domstate) if [ -f "$s/$2" ]; then cat "$s/$2"; else echo "error: failed to get domain '$2'" >&2; exit 1; fi ;;
esac
`
	if err := os.WriteFile(filepath.Join(dir, "virsh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
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

func vpsHost(t *testing.T, n *node, virshLog string) {
	f, err := os.OpenFile("/etc/bcd/config.toml", os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString("\n[instances]\nruntimes = [\"libvirt-kvm\"]\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	spec := `{"nodeId": "node_e2e", "generation": "1", "instances": {
	  "instances": [{"id": "vm3", "runtime": "libvirt-kvm", "vcpus": 1, "memoryBytes": "268435456", "state": "running",
	    "userData": "I2Nsb3VkLWNvbmZpZwo=", "nics": [{"bridge": "bcbr0", "mac": "52:54:00:00:00:03"}],
	    "volumes": [{"volumeId": "data", "serial": "data"}]}],
	  "volumes": [{"id": "data", "sizeBytes": "1073741824"}]}}`
	res := n.pass(spec)
	if res["state"] != "SECTION_STATE_APPLIED" || !strings.Contains(string(must(json.Marshal(res["report"]))), `"state":"running"`) {
		t.Fatalf("the first pass: %v", res)
	}
	tap := helper.TapName("vm3", 0)
	details := run(t, "ip", "-d", "link", "show", tap)
	for _, want := range []string{"master bcbr0", "tun type tap", "user bcd"} {
		if !strings.Contains(details, want) {
			t.Fatalf("the tap lacks %q:\n%s", want, details)
		}
	}
	xml := "/var/lib/bcd-helper/domains/bcd-vm3.xml"
	// The disk is the node's volume, checked and bound at root's path.
	disk := "/var/lib/bcd-helper/disks/bcd-vm3/vda"
	data, err := os.ReadFile(xml)
	if err != nil || !strings.Contains(string(data), `<target dev="`+tap+`" managed="no">`) ||
		!strings.Contains(string(data), `<source file="`+disk+`">`) || strings.Contains(string(data), "/var/lib/bcd/volumes") {
		t.Fatalf("the domain XML: %v\n%s", err, data)
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
	if calls, _ := os.ReadFile(virshLog); !strings.Contains(string(calls), "define "+xml+"\n") || !strings.Contains(string(calls), "start bcd-vm3\n") {
		t.Fatalf("virsh calls:\n%s", calls)
	}

	res = n.pass(`{"nodeId": "node_e2e", "generation": "2", "instances": {}}`)
	if res["state"] != "SECTION_STATE_APPLIED" {
		t.Fatalf("the second pass: %v", res)
	}
	if out, err := exec.Command("ip", "link", "show", tap).CombinedOutput(); err == nil {
		t.Fatalf("the tap remains: %s", out)
	}
	for _, p := range []string{xml, seed, "/var/lib/bcd/volumes/data.raw", "/var/lib/bcd/instances/libvirt-kvm/vm3.json", filepath.Dir(disk)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s remains (%v)", p, err)
		}
	}
	if calls, _ := os.ReadFile(virshLog); !strings.Contains(string(calls), "destroy bcd-vm3\nundefine bcd-vm3\n") {
		t.Fatalf("virsh calls:\n%s", calls)
	}
}

func must(data []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return data
}
