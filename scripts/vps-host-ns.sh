#!/usr/bin/env bash
# The real-guest scenarios' VPS host (docs/harness.md, "The VPS host"):
# run by the harness as `ip netns exec <ns> unshare --mount --propagation
# private bash scripts/vps-host-ns.sh SCRATCH CAPS`, in a network namespace of
# its own and a private mount namespace. /etc and /var become overlays
# whose upper layers live on a tmpfs at SCRATCH, /run a fresh tmpfs, so
# libvirt's configuration, state, logs and sockets are this host's alone
# and nothing reaches the machine; huge pages are mounted at
# /run/hugepages; QEMU runs as root without dynamic ownership (the
# harness's files stay as they are); the instance bridge bcbr0 is made;
# virtlogd and libvirtd start as daemons (there is no systemd); libvirt's
# cache of QEMU's capabilities is CAPS, a directory of the harness's kept
# across runs (probing QEMU takes libvirtd about 8 s here). libvirtd runs
# on CPU 0: it checks a cache against the CPUID of the CPU it runs on, which
# differs between the two of this machine (its guests' QEMU is not held to
# it: libvirt gives a guest every online CPU unless its plan pins it). It
# prints
# "ready" and then holds the namespaces until its standard input ends; the
# harness kills what runs inside when it is done.
#
# BCD_VPS_HOST_NS holds the harness's own mount and network namespaces
# (readlink /proc/self/ns/{mnt,net}); the script refuses to mount anything
# in either.
set -euo pipefail
scratch=$1
caps=$2
for ns in mnt net; do
  self=$(readlink "/proc/self/ns/$ns")
  if [[ -z "${BCD_VPS_HOST_NS:-}" || -z "$self" || " $BCD_VPS_HOST_NS " == *" $self "* ]]; then
    echo "vps-host-ns: not in a private $ns namespace; refusing to mount anything" >&2
    exit 1
  fi
done
mount -t tmpfs -o mode=0700 vps-host "$scratch"
for dir in /etc /var; do
  layer="$scratch/overlay${dir//\//-}"
  mkdir -p "$layer/upper" "$layer/work"
  mount -t overlay overlay -o "lowerdir=$dir,upperdir=$layer/upper,workdir=$layer/work" "$dir"
done
mkdir -p /var/cache/libvirt/qemu/capabilities "$caps"
mount --bind "$caps" /var/cache/libvirt/qemu/capabilities
mount -t tmpfs -o mode=0755 vps-host-run /run
mkdir -p /run/hugepages
mount -t hugetlbfs -o pagesize=2M vps-host-hugepages /run/hugepages
cat >> /etc/libvirt/qemu.conf <<'CONF'
# The harness's VPS host (scripts/vps-host-ns.sh).
user = "root"
group = "root"
dynamic_ownership = 0
hugetlbfs_mount = "/run/hugepages"
CONF
rm -f /etc/libvirt/qemu/networks/autostart/*.xml
ip link set lo up
ip link add bcbr0 type bridge
ip link set bcbr0 up
virtlogd -d
taskset -c 0 libvirtd -d
for _ in $(seq 200); do
  [[ -S /run/libvirt/libvirt-sock ]] && virsh -c qemu:///system version >/dev/null 2>&1 && break
  sleep 0.05
done
virsh -c qemu:///system version >/dev/null
echo ready
exec cat >/dev/null
