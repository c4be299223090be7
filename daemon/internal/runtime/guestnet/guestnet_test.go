// Tests of the instance network's addresses and network-config.

package guestnet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"bcd/internal/runtime"
	"bcd/internal/runtime/plan"
)

func TestAnInstanceKeepsItsAddressAndNoTwoShareOne(t *testing.T) {
	a := Addresses{Dir: filepath.Join(t.TempDir(), "addresses")}
	first, err := a.Assign("vm1", 0)
	if err != nil || !plan.GuestAddress(first) {
		t.Fatalf("%q %v", first, err)
	}
	if again, _ := a.Assign("vm1", 0); again != first {
		t.Fatalf("assigned again: %s, then %s", first, again)
	}
	second, _ := a.Assign("vm1", 1)
	// Another instance whose first choice is taken probes on.
	if err := os.WriteFile(filepath.Join(a.Dir, "169.254.7.7"), []byte("squatter 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	other, _ := a.Assign("vm2", 0)
	if second == first || other == first || other == second || other == "169.254.7.7" {
		t.Fatalf("shared: %s %s %s", first, second, other)
	}
	if id, ok := a.Owner(first); !ok || id != "vm1" {
		t.Fatalf("the owner of %s is %q", first, id)
	}
	if _, ok := a.Owner(plan.MetadataAddress); ok {
		t.Fatal("the metadata address has an owner")
	}
	if _, ok := a.Owner("../etc/passwd"); ok {
		t.Fatal("a path has an owner")
	}
	if err := a.Release("vm1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Owner(first); ok {
		t.Fatal("a released address is still held")
	}
	if id, _ := a.Owner(other); id != "vm2" {
		t.Fatal("releasing vm1 released vm2's")
	}
	if _, err := a.Assign("../x", 0); err == nil {
		t.Fatal("a bad id got an address")
	}
}

func TestTheNetworkConfigGivesEachNICItsAddress(t *testing.T) {
	d := &runtime.Domain{ID: "vm1", NICs: []runtime.NIC{{Bridge: "bcbr0", MAC: "52:54:00:00:00:01", Address: "169.254.10.2"}, {Bridge: "bcbr0"}}}
	got := string(NetworkConfig(d))
	want := "version: 2\nethernets:\n  nic0:\n    match:\n      macaddress: \"52:54:00:00:00:01\"\n    addresses: [169.254.10.2/16]\n"
	if got != want {
		t.Fatalf("%q", got)
	}
	if strings.Contains(got, "nic1") {
		t.Fatal("a NIC without an address is configured")
	}
}
