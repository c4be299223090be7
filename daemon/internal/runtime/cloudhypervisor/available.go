// Whether a host has the cloud-hypervisor runtime: its binary, and a KVM
// that runs guests. cloud-hypervisor has no emulator to fall back on, so a
// host without either does not advertise the runtime, and the control
// plane places nothing there (docs/daemon.md, "Instances").

package cloudhypervisor

import (
	"fmt"
	"os"
	"os/exec"

	"bcd/internal/runtime"
	"golang.org/x/sys/unix"
)

// The KVM ioctls of the probe (linux/kvm.h).
const (
	kvmGetAPIVersion = 0xAE00
	kvmCreateVM      = 0xAE01
	kvmAPIVersion    = 12
)

// Available says whether this host can run cloud-hypervisor guests, and
// why not: the binary (a path, or a name on PATH) must be there, the
// accelerator KVM (a host that runs guests under TCG has no working KVM),
// and /dev/kvm must open and create a VM.
func Available(binary, accelerator string) (bool, string) {
	if _, err := exec.LookPath(binary); err != nil {
		return false, fmt.Sprintf("no %s binary (%v)", binary, err)
	}
	if accelerator == runtime.AccelTCG {
		return false, "the accelerator is tcg: KVM does not run guests on this host"
	}
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Sprintf("no usable /dev/kvm (%v)", err)
	}
	defer f.Close()
	if v, err := unix.IoctlRetInt(int(f.Fd()), kvmGetAPIVersion); err != nil || v != kvmAPIVersion {
		return false, fmt.Sprintf("/dev/kvm speaks API %d (%v), not %d", v, err, kvmAPIVersion)
	}
	vm, err := unix.IoctlRetInt(int(f.Fd()), kvmCreateVM)
	if err != nil {
		return false, fmt.Sprintf("/dev/kvm cannot create a VM (%v)", err)
	}
	unix.Close(vm)
	return true, ""
}
