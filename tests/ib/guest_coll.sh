#!/bin/sh
# Runs inside each VM of tests/ib/rxe_vms.sh (ROLE a or b): hetccl-perf with
# checking for every collective, RANKS_PER_VM ranks in each VM (rank r lives
# in VM a when r < RANKS_PER_VM), so ranks of one VM talk over shm and ranks
# of the two VMs over ib (rxe0). Then the fault cases. Prints one
# "HC-IB-CASE name pass|FAIL" line per case and exits 1 if any failed.
#   guest_coll.sh BUILD_DIR SECRET RANKS_PER_VM [CASES...]
# CASES: coll (every collective), stress (4 queue pairs per peer, 64K chunks,
# 2 eager slots of 1K: credits run out, chunks spread; registrations per
# transfer), peer_killed, qp_error
# (default: all of these), regcache (tests/ib/test_ib_regcache.c, VM a only),
# pair (tests/ib/test_ib_pair.c: the transport contract suite of
# tests/common/net_contract.h, one process per VM: sizes on every path,
# ordering, many in flight, mismatched counts and calls, a peer that closes
# or is killed), gdr
# (tests/gpu/test_ib_gdr.c over the fake libcuda, VM a only: the dma-buf
# export, then ibv_reg_dmabuf_mr on rxe0, which rxe refuses: AUTO must fall
# back cleanly).
build=$1 secret=$2 per_vm=$3
shift 3
cases=${*:-pair coll regcache gdr stress peer_killed qp_error}
perf=$build/tools/hetccl-perf
world=$((2 * per_vm))
base=0
[ "$ROLE" = b ] && base=$per_vm
master=10.0.3.1
out=$OUT/$ROLE
mkdir -p "$out"
failed=0
port=29500

# run_ranks NAME TIMEOUT ENV... -- PERF ARGS: starts this VM's ranks, waits;
# rank logs in $out/NAME.<rank>.log; returns how many ranks failed.
run_ranks() {
  name=$1 tmo=$2
  shift 2
  envs=
  while [ "$1" != -- ]; do envs="$envs $1"; shift; done
  shift
  pids=
  i=0
  while [ $i -lt "$per_vm" ]; do
    r=$((base + i))
    # shellcheck disable=SC2086
    env MASTER_ADDR=$master MASTER_PORT=$port RANK=$r WORLD_SIZE=$world LOCAL_RANK=$i LOCAL_WORLD_SIZE=$per_vm \
      HETCCL_SECRET="$secret" HETCCL_SOCKET_IFNAME==eth0 HETCCL_DEBUG=INFO HETCCL_DEBUG_SUBSYS=NET,API,ENV \
      $envs timeout "$tmo" "$perf" "$@" >"$out/$name.$r.log" 2>&1 &
    pids="$pids $!"
    i=$((i + 1))
  done
  nfail=0
  for p in $pids; do wait "$p" || nfail=$((nfail + 1)); done
  return $nfail
}

verdict() { # name ok(0/1) note
  if [ "$2" = 0 ]; then echo "HC-IB-CASE $1 pass $3"; else echo "HC-IB-CASE $1 FAIL $3"; failed=1; fi
}

show_logs() { # name: the interesting lines of every rank of this VM
  for f in "$out/$1".*.log; do
    echo "--- $f"
    grep -vE ' INFO ENV ' "$f" | tail -40
  done
}

echo "--- hetccl-info in VM $ROLE:"
"$build/tools/hetccl-info" | sed 's/^/  /'
"$build/tools/hetccl-info" | grep -q "ib: usable" || { echo "HC-IB-CASE hetccl_info FAIL (ib not usable)"; failed=1; }

for c in $cases; do
  case $c in
  coll)
    for coll in all_reduce all_gather reduce_scatter broadcast reduce alltoall gather scatter sendrecv; do
      port=$((port + 1))
      run_ranks "$coll" 300 HETCCL_NET=IB -- "$coll" -b 8 -e 4M -f 8 -n 2 -w 1 -c 1 -T 240
      rc=$?
      ok=1
      if [ $rc = 0 ] && grep -q " ib: .* up via rxe0" "$out/$coll.$base.log"; then
        ok=0
        if [ "$ROLE" = a ] && ! grep -q "Out of bounds values : 0 OK" "$out/$coll.0.log"; then ok=1; fi
      fi
      [ $ok = 0 ] || show_logs "$coll"
      [ "$ROLE" = a ] && grep -E "^ +[0-9]+ " "$out/$coll.0.log" | tail -2
      verdict "$coll" $ok "($per_vm ranks per VM, over ib)"
    done
    ;;
  pair)
    mkdir -p "$OUT/pair"
    r=0
    [ "$ROLE" = b ] && r=1
    HETCCL_DEBUG=INFO HETCCL_DEBUG_SUBSYS=NET timeout 600 "$build/tests/test_ib_pair" $r "$OUT/pair" \
      >"$out/pair.log" 2>&1
    rc=$?
    grep -E "^ok |FAIL|skip|checks," "$out/pair.log"
    [ $rc = 0 ] || tail -30 "$out/pair.log"
    verdict pair $rc "(transport contract suite: sizes, ordering, 64 in flight, mismatches, peer closed or killed)"
    ;;
  gdr)
    if [ "$ROLE" = a ]; then
      LD_LIBRARY_PATH=$build/tests/fake-cuda FAKE_CUDA_DEVICES=1 HETCCL_NVRTC_LIBRARY=none HETCCL_DEBUG=INFO \
        HETCCL_DEBUG_SUBSYS=NET "$build/tests/test_ib_gdr" >"$out/gdr.log" 2>&1
      rc=$?
      grep -E "PASS|FAIL|skip|refuses" "$out/gdr.log"
      [ $rc = 0 ] || cat "$out/gdr.log"
      grep -qE "refused the dma-buf|PASS ib registration" "$out/gdr.log" || rc=1
      verdict gdr $rc "(dma-buf export over the fake libcuda, ibv_reg_dmabuf_mr on rxe0)"
    fi
    ;;
  regcache)
    if [ "$ROLE" = a ]; then
      HETCCL_DEBUG=INFO HETCCL_DEBUG_SUBSYS=NET "$build/tests/test_ib_regcache" >"$out/regcache.log" 2>&1
      rc=$?
      grep -E "PASS|FAIL|skip" "$out/regcache.log"
      [ $rc = 0 ] || cat "$out/regcache.log"
      verdict regcache $rc "(freed and reused memory noticed)"
    fi
    ;;
  stress)
    for coll in all_reduce alltoall sendrecv; do
      port=$((port + 1))
      run_ranks "stress_$coll" 300 HETCCL_NET=IB HETCCL_IB_QPS_PER_CONN=4 HETCCL_IB_CHUNK=64K \
        HETCCL_IB_EAGER_SLOTS=2 HETCCL_IB_EAGER_BYTES=1K HETCCL_IB_REG_CACHE=0 -- "$coll" -b 8 -e 1M -f 4 -n 3 -w 1 -c 2 -T 240
      rc=$?
      ok=1
      if [ $rc = 0 ] && grep -q " ib: .* up via rxe0:1, 4 queue pairs" "$out/stress_$coll.$base.log"; then
        ok=0
        if [ "$ROLE" = a ] && ! grep -q "Out of bounds values : 0 OK" "$out/stress_$coll.0.log"; then ok=1; fi
      fi
      [ $ok = 0 ] || show_logs "stress_$coll"
      verdict "stress_$coll" $ok "(4 queue pairs, 64K chunks, 2 eager slots of 1K, no registration cache)"
    done
    ;;
  peer_killed)
    # Rank 1 (last rank of VM b) dies mid-run: every survivor must fail with
    # an error naming a peer, long before the timeout, and none may hang.
    port=$((port + 1))
    victim=$((world - 1))
    if [ "$ROLE" = b ]; then
      (
        sleep 25
        for d in /proc/[0-9]*; do
          [ "$(cat "$d/comm" 2>/dev/null)" = hetccl-perf ] || continue
          tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -qx "RANK=$victim" && kill -KILL "${d#/proc/}"
        done
      ) &
      killer=$!
    fi
    t0=$(date +%s)
    run_ranks peer_killed 200 HETCCL_NET=IB HETCCL_TIMEOUT=120 -- all_reduce -b 1M -e 1M -n 100000 -w 1 -c 0 -T 180
    t1=$(date +%s)
    [ "$ROLE" = b ] && wait "$killer" 2>/dev/null
    ok=0
    i=0
    while [ $i -lt "$per_vm" ]; do
      r=$((base + i))
      f=$out/peer_killed.$r.log
      if [ $r != $victim ]; then
        # A clean error: the failed call reported, no timeout (124), no crash.
        grep -qE "failed|error" "$f" || ok=1
        grep -qE "timed out|Segmentation|Aborted|AddressSanitizer" "$f" && ok=1
      fi
      i=$((i + 1))
    done
    [ $((t1 - t0)) -lt 170 ] || ok=1
    [ $ok = 0 ] || show_logs peer_killed
    for f in "$out"/peer_killed.*.log; do grep -m2 -E "WARN" "$f"; done
    verdict peer_killed $ok "(survivors failed cleanly after $((t1 - t0)) s)"
    ;;
  qp_error)
    # Rank 0 forces its first queue pair to rank world/2 into the error
    # state after 40 writes: both ends must fail cleanly, no hang.
    port=$((port + 1))
    t0=$(date +%s)
    if [ "$ROLE" = a ]; then
      run_ranks qp_error 200 HETCCL_NET=IB HETCCL_TIMEOUT=120 HETCCL_IB_FAULT_AFTER=40 -- \
        all_reduce -b 1M -e 1M -n 1000 -w 1 -c 0 -T 180
    else
      run_ranks qp_error 200 HETCCL_NET=IB HETCCL_TIMEOUT=120 -- all_reduce -b 1M -e 1M -n 1000 -w 1 -c 0 -T 180
    fi
    nf=$?
    t1=$(date +%s)
    ok=0
    [ "$nf" = "$per_vm" ] || ok=1 # every rank of this VM must have failed
    for f in "$out"/qp_error.*.log; do
      grep -qE "timed out|Segmentation|Aborted|AddressSanitizer" "$f" && ok=1
    done
    [ "$ROLE" = a ] && { grep -q "forcing queue pair 0" "$out/qp_error.0.log" || ok=1; }
    [ $((t1 - t0)) -lt 170 ] || ok=1
    [ $ok = 0 ] || show_logs qp_error
    for f in "$out"/qp_error.*.log; do grep -m2 -E "WARN" "$f"; done
    verdict qp_error $ok "(all ranks failed cleanly after $((t1 - t0)) s)"
    ;;
  esac
done
exit $failed
