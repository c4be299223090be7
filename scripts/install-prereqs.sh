#!/usr/bin/env bash
# Installs what the workspace needs from Debian when it is missing: the TPM
# stack (swtpm, tpm2-tss headers, tpm2-tools), pkg-config and OpenSSL
# headers, iproute2 and util-linux for the namespace runners, passwd (useradd)
# for helper-e2e, libvirt-clients and libxml2-utils (virt-xml-validate and the
# xmllint it runs) for the VPS scenarios' plans, tmux for the console CLI's
# scenario, postgresql (15: initdb and pg_ctl for the throwaway clusters of
# the PostgreSQL store's tests and scenarios), openssh-client (ssh-keygen:
# the access tests read bcd's KRL with -Q and the SSH certificates with
# -L), and for the real guests (docs/harness.md, "Real guests"): QEMU
# (qemu-system-x86, qemu-utils), libvirt's daemons (libvirt-daemon-system,
# libvirt-daemon-driver-qemu), Debian's kernel (linux-image-amd64),
# busybox-static, e2fsprogs, cpio and xz-utils for the guest image,
# dosfstools and mtools for the seed disk, nftables for the instance
# network's guard. As root it runs apt-get;
# otherwise it prints the exact command to run and fails. Either way it says
# what it did in one line. Rust and Go are expected on PATH (Go 1.26 or
# later); protoc comes vendored with cargo.
set -euo pipefail

packages=(swtpm swtpm-tools libtss2-dev tpm2-tools pkg-config libssl-dev iproute2 util-linux passwd libvirt-clients libxml2-utils tmux postgresql
  openssh-client qemu-system-x86 qemu-utils libvirt-daemon-system libvirt-daemon-driver-qemu linux-image-amd64 busybox-static e2fsprogs cpio
  xz-utils dosfstools mtools nftables)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

for tool in cargo go; do
  command -v "$tool" >/dev/null || { echo "error: $tool is not on PATH (install Rust and Go 1.26 first)" >&2; exit 1; }
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "prerequisites: all ${#packages[@]} Debian packages present"
  exit 0
fi

cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  log="${TMPDIR:-/tmp}/bcd-prereqs-apt.log"
  echo "prerequisites: installing ${missing[*]} with apt-get (log: $log)"
  bash -c "$cmd" >"$log" 2>&1 || { cat "$log" >&2; echo "prerequisites: apt-get failed (log above)" >&2; exit 1; }
else
  echo "prerequisites missing: ${missing[*]}; run as root: sudo sh -c '$cmd'" >&2
  exit 1
fi
