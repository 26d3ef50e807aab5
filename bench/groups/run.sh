#!/usr/bin/env bash
# Hierarchical plans against the flat ones where the link between groups is
# the slow one: two "hosts" (network namespaces joined by a veth pair whose
# rate tc limits to RATE), two ranks on each, the groups being the hosts and
# the ranks interleaved (ranks 0, 2 on host a; 1, 3 on host b), so the flat
# ring crosses between hosts at every hop. Ranks of one host meet through
# shared memory. hetccl-perf runs every collective with checking under
# HETCCL_ALGO=RING (flat) and HIER; the table gives the time of one call
# (out of place, mean of 5) and the speed-up RING time / HIER time.
#   bench/groups/run.sh                      RATE=400mbit SIZE=4M
# Needs root and iproute2 (tc); prints "skip" and exits 77 without them.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}
perf=$build/tools/hetccl-perf
rate=${RATE:-400mbit}
size=${SIZE:-4M}
if [ "$(id -u)" != 0 ] || ! command -v tc >/dev/null; then
  echo "skip: needs root and tc (iproute2)"; exit 77
fi
[ -x "$perf" ] || { echo "build first: $perf is missing"; exit 1; }
tag=hg$$
a=${tag}a b=${tag}b
cleanup() { ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; }
trap cleanup EXIT
ip netns add "$a"
ip netns add "$b"
ip link add "v$a" type veth peer name "v$b"
ip link set "v$a" netns "$a"
ip link set "v$b" netns "$b"
# 10.214.x is a private range used only on this veth pair, inside these namespaces.
ip -n "$a" addr add 10.214.0.1/24 dev "v$a"
ip -n "$b" addr add 10.214.0.2/24 dev "v$b"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "v$a" up
ip -n "$b" link set "v$b" up
tc -n "$a" qdisc add dev "v$a" root tbf rate "$rate" burst 256kb latency 50ms
tc -n "$b" qdisc add dev "v$b" root tbf rate "$rate" burst 256kb latency 50ms
secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')

# The time of one call (out of place, us), from rank 0's log
run() { # algo collective
  local port=$((20000 + RANDOM % 20000)) pids=() r ns host rc=0
  for r in 0 1 2 3; do
    if [ $((r % 2)) = 0 ]; then ns=$a host=a; else ns=$b host=b; fi
    ip netns exec "$ns" env MASTER_ADDR=10.214.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=4 LOCAL_RANK=$((r / 2)) \
      HETCCL_SECRET="$secret" HETCCL_SOCKET_IFNAME="v$ns" HETCCL_GROUP=$host HETCCL_ALGO="$1" HETCCL_TIMEOUT=120 \
      timeout 300 "$perf" "$2" -b "$size" -e "$size" -n 5 -w 1 -c 1 >"/tmp/$tag.$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  if [ $rc != 0 ] || ! grep -q "Out of bounds values : 0 OK" "/tmp/$tag.0.log"; then
    cat "/tmp/$tag.0.log" "/tmp/$tag.1.log" >&2
    echo "FAIL: $2 under HETCCL_ALGO=$1" >&2
    exit 1
  fi
  awk '$1 ~ /^[0-9]+$/ && NF >= 9 { t = $6 } END { print t }' "/tmp/$tag.0.log"
  rm -f /tmp/"$tag".*.log
}

echo "4 ranks on two hosts (groups), interleaved; link between hosts $rate; $size per call"
printf '%-16s %14s %14s %8s\n' collective "RING time(us)" "HIER time(us)" speed-up
for coll in all_reduce all_gather reduce_scatter broadcast reduce alltoall; do
  flat=$(run RING "$coll")
  hier=$(run HIER "$coll")
  printf '%-16s %14s %14s %8s\n' "$coll" "$flat" "$hier" "$(awk -v h="$hier" -v f="$flat" 'BEGIN { printf "%.2f", (h > 0 ? f / h : 0) }')"
done
