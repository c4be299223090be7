// Package guestnet is an instance's place on the instance network
// (docs/daemon.md, "The metadata endpoint"): the link-local address of
// each of its NICs (169.254.1.0 to 169.254.254.255, never the metadata
// address), chosen by the host and held in <dir>/<address> files made with
// O_EXCL, so two instances never hold one and a restarted bcd finds them;
// the NoCloud network-config that tells the guest; and the owner of an
// address, which is how the metadata endpoint knows which instance asks
// (bcd helper lets an instance's tap send from its own address only).
package guestnet

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"bcd/internal/runtime"
	"bcd/internal/runtime/plan"
)

// Prefix is the instance network's prefix length (169.254.0.0/16).
const Prefix = 16

// ErrExhausted is an instance network with no free address.
var ErrExhausted = errors.New("no free address on the instance network")

// Addresses are the addresses held under Dir.
type Addresses struct {
	// Dir holds one file per address, "<id> <nic>".
	Dir string
}

// space is how many addresses there are: 254 × 254 /24 slots of 1 to 254.
const space = 254 * 254

// nth is the i-th address of the space.
func nth(i int) string {
	return fmt.Sprintf("169.254.%d.%d", 1+i/254, 1+i%254)
}

func owner(id string, nic int) string { return id + " " + strconv.Itoa(nic) + "\n" }

// Assign returns the address of an instance's NIC: the one it holds, else
// the first free one from a place its id and NIC choose.
func (a Addresses) Assign(id string, nic int) (string, error) {
	if !runtime.IDPattern.MatchString(id) {
		return "", fmt.Errorf("%w: instance id %q", runtime.ErrInvalid, id)
	}
	if held, err := a.held(id); err != nil || held[nic] != "" {
		return held[nic], err
	}
	if err := os.MkdirAll(a.Dir, 0o700); err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte("bcd-address/v1\x00" + id + "\x00" + strconv.Itoa(nic)))
	start := int(binary.BigEndian.Uint32(sum[:4]) % space)
	for i := range space {
		addr := nth((start + i) % space)
		if addr == plan.MetadataAddress {
			continue
		}
		f, err := os.OpenFile(filepath.Join(a.Dir, addr), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		_, err = f.WriteString(owner(id, nic))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(f.Name())
			return "", err
		}
		return addr, nil
	}
	return "", ErrExhausted
}

// held is what an instance holds, by NIC.
func (a Addresses) held(id string) (map[int]string, error) {
	out := map[int]string{}
	entries, err := os.ReadDir(a.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		owner, nic, ok := a.read(e.Name())
		if ok && owner == id {
			out[nic] = e.Name()
		}
	}
	return out, nil
}

// read is an address file's owner.
func (a Addresses) read(addr string) (string, int, bool) {
	if !plan.GuestAddress(addr) {
		return "", 0, false
	}
	data, err := os.ReadFile(filepath.Join(a.Dir, addr))
	if err != nil {
		return "", 0, false
	}
	id, nic, ok := strings.Cut(strings.TrimSuffix(string(data), "\n"), " ")
	n, err := strconv.Atoi(nic)
	if !ok || err != nil || !runtime.IDPattern.MatchString(id) {
		return "", 0, false
	}
	return id, n, true
}

// Owner is the instance that holds addr ("" and false when none does).
func (a Addresses) Owner(addr string) (string, bool) {
	id, _, ok := a.read(addr)
	return id, ok
}

// Release gives back every address of an instance.
func (a Addresses) Release(id string) error {
	held, err := a.held(id)
	if err != nil {
		return err
	}
	for _, addr := range held {
		if err := os.Remove(filepath.Join(a.Dir, addr)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// AssignAll gives each NIC of d its address (its MAC must be set: the
// host's filter holds the two together).
func (a Addresses) AssignAll(d *runtime.Domain) error {
	for i := range d.NICs {
		addr, err := a.Assign(d.ID, i)
		if err != nil {
			return err
		}
		d.NICs[i].Address = addr
	}
	return nil
}

// NetworkConfig is the NoCloud network-config (version 2) that gives each
// NIC of d its address, matched by MAC.
func NetworkConfig(d *runtime.Domain) []byte {
	var b strings.Builder
	b.WriteString("version: 2\nethernets:\n")
	for i, n := range d.NICs {
		if n.Address == "" {
			continue
		}
		fmt.Fprintf(&b, "  nic%d:\n    match:\n      macaddress: %q\n    addresses: [%s/%d]\n", i, n.MAC, n.Address, Prefix)
	}
	return []byte(b.String())
}
