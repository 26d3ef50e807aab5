#!/bin/sh
# One host's half of bench/ib/run.sh: on the same pair of hosts, with the
# same device and port, first perftest's ib_write_bw (the wire's ceiling for
# one-way RDMA writes), then hetccl-perf over ib with one rank per host.
# Role a is perftest's server and hetccl's rank 0 (the root of the
# broadcast); role b the client and rank 1. Output lines for run.sh:
#   IBBENCH write_bw BYTES GBIT_PER_S        (role b; perftest --report_gbits)
#   IBBENCH COLL BYTES ALGBW_GBPS BUSBW_GBPS (role a; hetccl-perf, GB = 1e9 B)
#   bench/ib/pair.sh ROLE MY_IP PEER_IP DEV GID_INDEX BUILD_DIR SECRET ITERS SIZES...
# GID_INDEX "-" for InfiniBand ports (LIDs). Ports: 18600+ (perftest),
# 29600+ (hetccl's rendezvous) on MY_IP / PEER_IP.
role=$1 my_ip=$2 peer_ip=$3 dev=$4 gidx=$5 build=$6 secret=$7 iters=$8
shift 8
gid_opt=
[ "$gidx" != - ] && gid_opt="-x $gidx"
perf=$build/tools/hetccl-perf
master=$my_ip
[ "$role" = b ] && master=$peer_ip
port=18600
for size in "$@"; do
  port=$((port + 1))
  if [ "$role" = a ]; then
    # shellcheck disable=SC2086
    timeout 300 ib_write_bw -d "$dev" $gid_opt -s "$size" -n "$iters" -F -p $port --report_gbits >/dev/null 2>&1
  else
    t0=$(date +%s)
    while :; do # the server may not listen yet
      # shellcheck disable=SC2086
      out=$(timeout 300 ib_write_bw -d "$dev" $gid_opt -s "$size" -n "$iters" -F -p $port --report_gbits \
        "$peer_ip" 2>&1) && break
      [ $(($(date +%s) - t0)) -lt 60 ] || { echo "$out"; echo "IBBENCH write_bw $size failed"; break; }
      sleep 0.5
    done
    echo "$out" | awk -v s="$size" '$1 == s && NF >= 5 {print "IBBENCH write_bw", s, $4}'
  fi
done
# hetccl: a one-way transfer (broadcast of 2 ranks: rank 0 -> rank 1, busbw
# = algbw) and the all-reduce, every size of the sweep.
rank=0
[ "$role" = b ] && rank=1
for coll in broadcast all_reduce; do
  port=$((port + 1))
  for size in "$@"; do
    port=$((port + 1))
    out=$(env MASTER_ADDR="$master" MASTER_PORT=$((29600 + port % 1000)) RANK=$rank WORLD_SIZE=2 LOCAL_RANK=0 \
      HETCCL_SECRET="$secret" HETCCL_NET=IB HETCCL_IB_HCA="=$dev" \
      timeout 600 "$perf" "$coll" -b "$size" -e "$size" -n "$iters" -w 5 -c 1 -T 500 2>&1)
    [ "$role" = a ] || continue
    echo "$out" | awk -v c="$coll" '$1 ~ /^[0-9]+$/ && NF >= 13 {print "IBBENCH", c, $1, $7, $8}'
    echo "$out" | grep -q "Out of bounds values : 0 OK" || { echo "$out" | tail -5; echo "IBBENCH $coll $size FAILED"; }
  done
done
