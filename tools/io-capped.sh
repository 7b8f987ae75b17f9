#!/bin/sh
# Run a command with its reads from one block device capped, to measure the engine where the disk,
# not the arithmetic, is the limit (dev-only; Linux, root, cgroup v1 blkio or v2 io controller).
#
#   tools/io-capped.sh 1G node bin/waste.js bench /tmp/kl-full --cache-slots 208 --json
#
# Why: on the 2-vCPU development VM the host serves expert records at 5-7 GB/s, faster than two
# cores compute a Kimi-Linear token, so decode is compute-bound there and the overlap of reads with
# compute cannot be seen. A laptop has the opposite balance (fast cores, a 1-3 GB/s NVMe disk).
# The cap is applied by the kernel's block layer to O_DIRECT reads, so the engine and its I/O floor
# measurement (the same records read raw, in the same process) see the same disk.
#
# RATE: bytes per second, with an optional K, M or G suffix (powers of 1000).
# DEVICE: the device holding the model (default: the one holding the current directory).
set -eu
if [ $# -lt 2 ]; then
  echo "usage: tools/io-capped.sh RATE[K|M|G] COMMAND [ARGS...]   (env DEVICE=/dev/vda to choose the disk)" >&2
  exit 2
fi
rate=$1
shift
case $rate in
  *K) bps=$(( ${rate%K} * 1000 )) ;;
  *M) bps=$(( ${rate%M} * 1000000 )) ;;
  *G) bps=$(( ${rate%G} * 1000000000 )) ;;
  *) bps=$rate ;;
esac
dev=${DEVICE:-$(df --output=source . | tail -1)}
# a partition's whole disk: the cap has to name the disk
disk=$(lsblk -no PKNAME "$dev" 2>/dev/null | head -1)
[ -n "$disk" ] && dev=/dev/$disk
majmin=$(lsblk -dno MAJ:MIN "$dev" | tr -d ' ')
if [ -d /sys/fs/cgroup/blkio ]; then
  cg=/sys/fs/cgroup/blkio/waste-io-capped
  mkdir -p "$cg"
  echo "$majmin $bps" > "$cg/blkio.throttle.read_bps_device"
elif [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw io /sys/fs/cgroup/cgroup.controllers; then
  cg=/sys/fs/cgroup/waste-io-capped
  mkdir -p "$cg"
  echo "+io" > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
  echo "$majmin rbps=$bps" > "$cg/io.max"
else
  echo "io-capped: no blkio or io cgroup controller here" >&2
  exit 1
fi
echo $$ > "$cg/cgroup.procs"
echo "io-capped: reads from $dev ($majmin) capped at $bps bytes/s" >&2
exec "$@"
