#!/usr/bin/env bash
# hetccl over ib next to perftest's ib_write_bw on the same pair of hosts,
# printing the ratios. Needs perftest on both hosts, passwordless ssh to
# both, and this checkout (built) at the same path on both.
#   bench/ib/run.sh HOST_A HOST_B [DEV [GID_INDEX]]
# HOST_A/HOST_B: the addresses both the control traffic (ssh, hetccl's
# rendezvous, perftest's handshake) and ib_write_bw use. DEV: the RDMA
# device (default: the first ibv_devices lists on HOST_A); GID_INDEX:
# RoCE's (default 3, "-" for InfiniBand). Env: SIZES (default
# "64K 1M 8M 64M 256M" as bytes), ITERS (default 200), BUILD_DIR (default
# build).
# Under tests/ib/rxe_vms.sh the same pair.sh runs in two soft-RoCE VMs:
#   tests/ib/rxe_vms.sh bench/ib/vm_pair.sh $PWD/build
# (figures under CPU emulation say only that the script works).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 2 ] || { sed -n 2,16p "$0"; exit 2; }
a=$1 b=$2
dev=${3:-$(ssh "$a" ibv_devices | awk 'NR > 2 {print $1; exit}')}
gidx=${4:-3}
build=$(cd "${BUILD_DIR:-$root/build}" && pwd)
iters=${ITERS:-200}
sizes=()
for s in ${SIZES:-64K 1M 8M 64M 256M}; do
  case $s in
    *K) sizes+=($((${s%K} * 1024))) ;; *M) sizes+=($((${s%M} * 1048576))) ;; *G) sizes+=($((${s%G} * 1073741824))) ;;
    *) sizes+=("$s") ;;
  esac
done
secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "hosts $a (rank 0, perftest server) and $b; device $dev, GID index $gidx; $iters iterations"
ssh "$a" "$root/bench/ib/pair.sh" a "$a" "$b" "$dev" "$gidx" "$build" "$secret" "$iters" "${sizes[@]}" >"$out.a" 2>&1 &
pa=$!
ssh "$b" "$root/bench/ib/pair.sh" b "$b" "$a" "$dev" "$gidx" "$build" "$secret" "$iters" "${sizes[@]}" >"$out.b" 2>&1 &
pb=$!
wait $pa || true
wait $pb || true
cat "$out.a" "$out.b" | "$root/bench/ib/report.sh"
rm -f "$out.a" "$out.b"
