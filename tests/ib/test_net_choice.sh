#!/usr/bin/env bash
# On a host without a usable RDMA port (or without libibverbs): HETCCL_NET=IB makes init fail with
# a message naming the reason (never a silent fallback); left unset, ranks
# that cannot use shm go over sockets; a bad HETCCL_NET value is refused.
#   tests/ib/test_net_choice.sh RUN PERF
set -uo pipefail
run=$1 perf=$2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if HETCCL_NET=IB HETCCL_SHM_DISABLE=1 "$run" -n 2 --timeout 60 "$perf" all_reduce -b 8 -e 8 -n 1 >"$log" 2>&1; then
  cat "$log"; echo "FAIL: HETCCL_NET=IB ran without an RDMA port"; exit 1
fi
grep -qE "no usable RDMA port|libibverbs.so.1 not loadable" "$log" || { cat "$log"; echo "FAIL: no reason given"; exit 1; }
echo "HETCCL_NET=IB without a port: $(grep -m1 -o 'HETCCL_NET=IB: .*' "$log" || grep -m1 'RDMA' "$log")"
if HETCCL_NET=infiniband "$run" -n 2 --timeout 60 "$perf" all_reduce -b 8 -e 8 -n 1 >"$log" 2>&1; then
  cat "$log"; echo "FAIL: HETCCL_NET=infiniband accepted"; exit 1
fi
grep -q "HETCCL_NET=infiniband: must be" "$log" || { cat "$log"; echo "FAIL: bad value not named"; exit 1; }
HETCCL_DEBUG=INFO HETCCL_DEBUG_SUBSYS=API HETCCL_SHM_DISABLE=1 "$run" -n 2 --timeout 60 "$perf" all_reduce \
  -b 8 -e 64K -f 8 -n 1 -c 1 >"$log" 2>&1 || { cat "$log"; echo "FAIL: socket fallback"; exit 1; }
grep -q "0 over ib, 1 over sockets" "$log" || { cat "$log"; echo "FAIL: not over sockets"; exit 1; }
grep -q "Out of bounds values : 0 OK" "$log" || { cat "$log"; echo "FAIL: wrong results"; exit 1; }
echo "net choice: forced ib refused without a port, unset falls back to sockets"
