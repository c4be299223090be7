#!/usr/bin/env bash
# Runs a command as root in private mount and network namespaces where
# /etc, /usr/local and /var are overlays whose upper layers live on a tmpfs,
# /run is a fresh tmpfs and TMPDIR points into that tmpfs, so nothing the
# command writes there reaches the host: everything goes when the command
# ends and the namespaces with it. `cargo xtask helper-e2e` runs
# TestHelperAsRoot this way.
#
# Usage: scripts/helper-e2e-ns.sh SCRATCH-DIR COMMAND [ARGS…]
#   SCRATCH-DIR must exist (xtask makes it under the target directory); a
#   tmpfs is mounted on it inside the namespace only.
set -euo pipefail

if [[ "${1:-}" != "--inside" ]]; then
  [[ $# -ge 2 ]] || { echo "usage: $0 SCRATCH-DIR COMMAND [ARGS…]" >&2; exit 2; }
  # The caller's namespaces, for the checks inside (a process in another
  # mount namespace may not be allowed to read /proc/1/ns).
  BCD_HELPER_E2E_HOST_NS="$(readlink /proc/self/ns/mnt) $(readlink /proc/self/ns/net)"
  export BCD_HELPER_E2E_HOST_NS
  exec unshare --mount --net --propagation private "$0" --inside "$@"
fi
shift
scratch=$1
shift

for ns in mnt net; do
  self=$(readlink "/proc/self/ns/$ns")
  if [[ -z "$self" || " $BCD_HELPER_E2E_HOST_NS " == *" $self "* ]]; then
    echo "helper-e2e-ns: not in a private $ns namespace; refusing to mount anything" >&2
    exit 1
  fi
done

mount -t tmpfs -o mode=0700 helper-e2e "$scratch"
for dir in /etc /usr/local /var; do
  layer="$scratch/overlay${dir//\//-}"
  mkdir -p "$layer/upper" "$layer/work"
  mount -t overlay overlay -o "lowerdir=$dir,upperdir=$layer/upper,workdir=$layer/work" "$dir"
done
mount -t tmpfs -o mode=0755 helper-e2e-run /run
mkdir -p "$scratch/tmp"
chmod 1777 "$scratch/tmp"
export TMPDIR="$scratch/tmp"
ip link set lo up
exec "$@"
