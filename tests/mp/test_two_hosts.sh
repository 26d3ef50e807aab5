#!/usr/bin/env bash
# Two "hosts": network namespaces joined by a veth pair, with traffic only on
# that private link. One rank in each runs hetccl-perf with checking, over
# IPv4 and then over IPv6, with HETCCL_SOCKET_IFNAME picking the veth.
# Needs root and iproute2; exits 77 (skip) without them.
set -euo pipefail
perf=$1
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
  echo "skip: needs root and iproute2 (ip netns)"; exit 77
fi
tag=hc$$
a=${tag}a b=${tag}b
cleanup() { ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; }
trap cleanup EXIT
if ! ip netns add "$a" 2>/dev/null; then echo "skip: cannot create network namespaces here"; exit 77; fi
ip netns add "$b"
ip link add "v$a" type veth peer name "v$b"
ip link set "v$a" netns "$a"
ip link set "v$b" netns "$b"
# 10.213.x is a private range used only on this veth pair, inside these namespaces.
ip -n "$a" addr add 10.213.0.1/24 dev "v$a"
ip -n "$b" addr add 10.213.0.2/24 dev "v$b"
ip -n "$a" addr add fd00:213::1/64 dev "v$a" nodad
ip -n "$b" addr add fd00:213::2/64 dev "v$b" nodad
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "v$a" up
ip -n "$b" link set "v$b" up

secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
run_pair() { # family master_addr
  local family=$1 addr=$2 port=$((20000 + RANDOM % 20000)) rc=0
  echo "== $family: rank 0 in $a, rank 1 in $b, root $addr:$port"
  for r in 0 1; do
    ns=$a; [ $r = 1 ] && ns=$b
    ip netns exec "$ns" env MASTER_ADDR="$addr" MASTER_PORT=$port RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 \
      HETCCL_SECRET="$secret" HETCCL_SOCKET_IFNAME="v$tag" HETCCL_SOCKET_FAMILY="$family" HETCCL_TIMEOUT=60 \
      timeout 120 "$perf" all_reduce -b 8 -e 8M -f 8 -c 1 -n 5 >"/tmp/$tag.$r.log" 2>&1 &
    pids[$r]=$!
  done
  wait "${pids[0]}" || rc=1
  wait "${pids[1]}" || rc=1
  cat "/tmp/$tag.0.log"
  if [ $rc != 0 ]; then cat "/tmp/$tag.1.log"; echo "FAIL: $family run failed"; exit 1; fi
  if ! grep -q "Out of bounds values : 0 OK" "/tmp/$tag.0.log"; then echo "FAIL: wrong results over $family"; exit 1; fi
  rm -f "/tmp/$tag.0.log" "/tmp/$tag.1.log"
}
run_pair AF_INET 10.213.0.1
run_pair AF_INET6 fd00:213::1
echo "two hosts: IPv4 and IPv6 all-reduce correct"
