#!/usr/bin/env bash
# bench/cpu/compare.sh: hetccl against Open MPI and Gloo on the CPU of one
# machine, with one command, as root on Debian, from a clean clone.
#
#   bench/cpu/compare.sh [--netns | --no-netns] [--no-install]
#
# 1. Installs what is missing from Debian (openmpi-bin libopenmpi-dev
#    python3-torch gnuplot-nox, plus build-essential cmake iproute2 when
#    absent; one quiet apt-get update), builds hetccl-perf and hetccl-run
#    (RelWithDebInfo) into $BUILD_DIR (default build-bench), and compiles
#    bench/cpu/mpi_bench.c with mpicc into $BUILD_DIR/bench-cpu/.
# 2. Local part, rank counts 2 and 4, float32 sum, sizes 4K..256M (x4):
#      all_reduce:      hetccl, ompi-shm, ompi-tcp, gloo
#      all_gather:      hetccl, ompi-shm
#      reduce_scatter:  hetccl, ompi-shm
#    hetccl   = hetccl-run -n N hetccl-perf COLL -b .. -e .. -f 4 -c 0 -n ITERS -w 2
#               (its out-of-place busbw column; local ranks use whatever
#               transport hetccl picks)
#    ompi-shm = mpirun --allow-run-as-root --oversubscribe --bind-to none -n N
#               mpi_bench (Open MPI's defaults: pml ob1, btl vader, i.e. shared
#               memory with CMA single copy)
#    ompi-tcp = the same plus --mca pml ob1 --mca btl tcp,self
#               --mca btl_tcp_if_include lo (checked before the passes: the
#               loopback byte counters must grow by at least the bytes sent)
#    gloo     = bench/cpu/gloo_bench.py: torch.distributed, gloo backend,
#               CPU tensors, ranks from torch.multiprocessing, env:// on
#               127.0.0.1 (gloo's all_reduce is in place)
#    Every benchmark times the same way (nccl-tests' method, see
#    shared/reference/nccl-tests.md and the comment in mpi_bench.c): per size
#    2 warm-up ops, one untimed op, a barrier, ITERS ops back to back, time
#    per op averaged over ranks, busbw with nccl-tests' factors.
#    ITERS(size) = clamp(TARGET_BYTES / size, MIN_ITERS, MAX_ITERS); sizes
#    with equal ITERS are swept by one invocation (one hetccl-perf -b/-e
#    range), and mpi_bench/gloo_bench do exactly the same groups (-G).
#    PASSES passes; each pass runs every (library, collective, n) once at
#    every size, library order rotated per pass; the tables show the median
#    over passes of each (library, n, size).
# 3. Network namespaces (run when `ip netns` works, or forced with --netns):
#    two namespaces joined by a veth pair (10.214.0.1/24 and .2, nothing
#    else on that link), one rank in each, all_reduce 1M..256M:
#      hetccl-netns   = hetccl-perf with torchrun variables (MASTER_ADDR,
#                       MASTER_PORT, RANK, WORLD_SIZE, HETCCL_SECRET,
#                       HETCCL_SOCKET_IFNAME=<veth>)
#      ompi-tcp-netns = mpirun inside namespace A treating the two
#                       namespaces as two hosts: a plm_rsh_agent wrapper
#                       starts the second orted in namespace B (own UTS
#                       namespace, so its own host name); oob and btl tcp
#                       restricted to 10.214.0.0/24
#    The veth byte counters are reported for each library.
# 4. Prints the tables (busbw GB/s per library, hetccl's ratio to each as
#    "x1.84"), writes bench/cpu/results/compare-<date>.txt and .csv and the
#    plot bench/cpu/results/allreduce.png (busbw against size, log x).
#
# Environment: BUILD_DIR, PASSES (3), TARGET_BYTES (67108864), MIN_ITERS (2),
# MAX_ITERS (100), WARMUP (2), RUN_TIMEOUT (900 s per invocation),
# SIZES_MIN (4K), SIZES_MAX (256M), NETNS_MIN (1M), NS (rank counts, "2 4").
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-bench}
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
PASSES=${PASSES:-3}
TARGET_BYTES=${TARGET_BYTES:-67108864}
MIN_ITERS=${MIN_ITERS:-2}
MAX_ITERS=${MAX_ITERS:-100}
WARMUP=${WARMUP:-2}
RUN_TIMEOUT=${RUN_TIMEOUT:-900}
SIZES_MIN=${SIZES_MIN:-4K}
SIZES_MAX=${SIZES_MAX:-256M}
NETNS_MIN=${NETNS_MIN:-1M}
NS=${NS:-"2 4"}
PY=/usr/bin/python3
RESULTS=$HERE/results

netns_mode=auto install=1
for arg in "$@"; do
  case "$arg" in
    --netns) netns_mode=yes ;;
    --no-netns) netns_mode=no ;;
    --no-install) install=0 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare.sh: unknown argument $arg (try --help)" >&2; exit 2 ;;
  esac
done
if [ "$(id -u)" != 0 ]; then echo "compare.sh: run as root (apt-get, ip netns)" >&2; exit 2; fi

t_start=$(date +%s)
load_start=$(cut -d" " -f1-3 /proc/loadavg)
log() { printf '%s\n' "$*" >&2; }
to_bytes() { # 4K -> 4096
  local v=$1
  case "$v" in
    *[kK]) echo $(( ${v%?} << 10 )) ;; *[mM]) echo $(( ${v%?} << 20 )) ;;
    *[gG]) echo $(( ${v%?} << 30 )) ;; *) echo "$v" ;;
  esac
}
human() { # 4096 -> 4K
  local b=$1
  if (( b >= 1<<30 && b % (1<<30) == 0 )); then echo "$((b>>30))G"
  elif (( b >= 1<<20 && b % (1<<20) == 0 )); then echo "$((b>>20))M"
  elif (( b >= 1<<10 && b % (1<<10) == 0 )); then echo "$((b>>10))K"
  else echo "$b"; fi
}

# ---- 1. packages and builds ----
if [ $install = 1 ]; then
  pkgs=()
  command -v mpicc >/dev/null || pkgs+=(libopenmpi-dev)
  command -v mpirun >/dev/null || pkgs+=(openmpi-bin)
  [ -x $PY ] && $PY -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null || pkgs+=(python3-torch)
  command -v gnuplot >/dev/null || pkgs+=(gnuplot-nox)
  command -v cmake >/dev/null || pkgs+=(cmake)
  { command -v cc >/dev/null && command -v make >/dev/null && [ -e /usr/include/stdio.h ]; } || pkgs+=(build-essential)
  command -v ip >/dev/null || pkgs+=(iproute2)
  if [ ${#pkgs[@]} -gt 0 ]; then
    log "== installing from Debian: ${pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
  fi
fi
for c in mpicc mpirun gnuplot cmake cc; do
  command -v $c >/dev/null || { echo "compare.sh: $c missing (run without --no-install)" >&2; exit 1; }
done

WORK=$BUILD_DIR/bench-cpu
mkdir -p "$WORK" "$RESULTS"
log "== building hetccl (RelWithDebInfo) in $BUILD_DIR"
cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHETCCL_WERROR=OFF >"$WORK/cmake.log" 2>&1 ||
  { cat "$WORK/cmake.log" >&2; exit 1; }
cmake --build "$BUILD_DIR" -j"$(nproc)" --target hetccl-perf hetccl-run >>"$WORK/cmake.log" 2>&1 ||
  { tail -40 "$WORK/cmake.log" >&2; exit 1; }
PERF=$BUILD_DIR/tools/hetccl-perf
HRUN=$BUILD_DIR/tools/hetccl-run
MPIB=$WORK/mpi_bench
log "== building mpi_bench with mpicc"
mpicc -O2 -std=c11 -Wall -Wextra -o "$MPIB" "$HERE/mpi_bench.c"
GLOOB=$HERE/gloo_bench.py

# ---- iteration schedule: groups of consecutive sizes with equal ITERS ----
smin=$(to_bytes "$SIZES_MIN") smax=$(to_bytes "$SIZES_MAX") nsmin=$(to_bytes "$NETNS_MIN")
iters_for() { local i=$(( TARGET_BYTES / $1 )); (( i < MIN_ITERS )) && i=$MIN_ITERS; (( i > MAX_ITERS )) && i=$MAX_ITERS; echo $i; }
make_groups() { # lo hi -> "lo-hixIT,..." (bytes)
  local s=$1 hi=$2 out="" glo="" gprev="" git=""
  while (( s <= hi )); do
    local it; it=$(iters_for $s)
    if [ -n "$glo" ] && [ "$it" = "$git" ]; then gprev=$s
    else
      [ -n "$glo" ] && out+="${out:+,}${glo}-${gprev}x${git}"
      glo=$s gprev=$s git=$it
    fi
    s=$(( s * 4 ))
  done
  [ -n "$glo" ] && out+="${out:+,}${glo}-${gprev}x${git}"
  echo "$out"
}
GROUPS_LOCAL=$(make_groups "$smin" "$smax")
GROUPS_NETNS=$(make_groups "$nsmin" "$smax")
schedule_text() {
  local s=$smin out=""
  while (( s <= smax )); do out+="$(human $s):$(iters_for $s) "; s=$((s*4)); done
  echo "$out"
}

RAW=$WORK/raw.csv
echo "part,pass,coll,lib,n,size,busbw" >"$RAW"
failures=()

# Rows of an nccl-tests style table on stdin (optionally "[0] " prefixed):
# append "part,pass,coll,lib,n,size,busbw" to $RAW. busbw is recomputed from
# the (first, i.e. out-of-place) time column, $6 in microseconds, rather than
# read from the 2-decimal busbw column: size is the algbw byte count for all
# three collectives (nccl-tests.md §3/§5); factor 2(n-1)/n for all_reduce,
# (n-1)/n for all_gather and reduce_scatter.
collect() { # part pass coll lib n
  local f
  if [ "$3" = all_reduce ]; then f=$(awk -v n="$5" 'BEGIN { printf "%.10f", 2*(n-1)/n }')
  else f=$(awk -v n="$5" 'BEGIN { printf "%.10f", (n-1)/n }'); fi
  sed -e 's/^\[[0-9]*\] //' |
    awk -v p="$1,$2,$3,$4,$5" -v f="$f" '$1 ~ /^[0-9]+$/ && NF >= 8 && $6 + 0 > 0 { printf "%s,%s,%.6g\n", p, $1, $1 / ($6 * 1e3) * f }' >>"$RAW"
}

MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
MPI_TCP=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo)

run_one() { # pass coll lib n
  local pass=$1 coll=$2 lib=$3 n=$4 out=$WORK/run.out err=$WORK/run.err rc=0
  : >"$out"
  case $lib in
    hetccl)
      local g lo hi it
      for g in ${GROUPS_LOCAL//,/ }; do
        lo=${g%%-*}; hi=${g#*-}; it=${hi#*x}; hi=${hi%x*}
        timeout "$RUN_TIMEOUT" "$HRUN" -n "$n" "$PERF" "$coll" -b "$lo" -e "$hi" -f 4 -c 0 \
          -n "$it" -w "$WARMUP" >>"$out" 2>"$err" || { rc=$?; break; }
      done ;;
    ompi-shm)
      timeout "$RUN_TIMEOUT" "${MPIRUN[@]}" -n "$n" "$MPIB" "$coll" -G "$GROUPS_LOCAL" -f 4 -w "$WARMUP" \
        >"$out" 2>"$err" || rc=$? ;;
    ompi-tcp)
      timeout "$RUN_TIMEOUT" "${MPIRUN[@]}" "${MPI_TCP[@]}" -n "$n" "$MPIB" "$coll" -G "$GROUPS_LOCAL" -f 4 \
        -w "$WARMUP" >"$out" 2>"$err" || rc=$? ;;
    gloo)
      OMP_NUM_THREADS=1 timeout "$RUN_TIMEOUT" $PY "$GLOOB" -n "$n" -G "$GROUPS_LOCAL" -f 4 -w "$WARMUP" \
        >"$out" 2>"$err" || rc=$? ;;
  esac
  collect local "$pass" "$coll" "$lib" "$n" <"$out"
  if [ $rc != 0 ]; then
    failures+=("pass $pass $coll $lib n=$n: exit $rc")
    log "   FAILED ($lib $coll n=$n, exit $rc): $(tail -3 "$err" | tr '\n' ' ')"
  fi
}

# ---- the TCP check for ompi-tcp ----
lo_tx() { cat /sys/class/net/lo/statistics/tx_bytes; }
log "== checking that ompi-tcp really goes over TCP (loopback byte counter)"
tcp_check_bytes=$((16 << 20)) tcp_check_iters=10
b0=$(lo_tx)
"${MPIRUN[@]}" "${MPI_TCP[@]}" -n 2 "$MPIB" all_reduce -G "${tcp_check_bytes}-${tcp_check_bytes}x${tcp_check_iters}" -w 0 >/dev/null 2>"$WORK/tcpcheck.err"
b1=$(lo_tx)
"${MPIRUN[@]}" -n 2 "$MPIB" all_reduce -G "${tcp_check_bytes}-${tcp_check_bytes}x${tcp_check_iters}" -w 0 >/dev/null 2>>"$WORK/tcpcheck.err"
b2=$(lo_tx)
# 2 ranks x (iters + 1 untimed) all-reduces, each rank sending >= size/2 twice
expect=$(( 2 * (tcp_check_iters + 1) * tcp_check_bytes ))
tcp_mib=$(( (b1 - b0) >> 20 )) shm_mib=$(( (b2 - b1) >> 20 ))
if (( b1 - b0 >= expect * 9 / 10 )); then
  TCP_CHECK="ompi-tcp check: loopback carried ${tcp_mib} MiB for 11 x 16 MiB all-reduces on 2 ranks (>= $((expect>>20)) MiB expected): TCP; the same run over ompi-shm: ${shm_mib} MiB on loopback (other users of lo included)"
else
  TCP_CHECK="ompi-tcp check FAILED: loopback carried only ${tcp_mib} MiB (expected >= $((expect>>20)) MiB)"
  failures+=("$TCP_CHECK")
fi
log "   $TCP_CHECK"

# ---- 2. local passes ----
ITER_TEXT=$(schedule_text)
log "== local part: PASSES=$PASSES, n in {$NS}, iterations per size: $ITER_TEXT(warm-up $WARMUP)"
declare -A LIBS=([all_reduce]="hetccl ompi-shm ompi-tcp gloo" [all_gather]="hetccl ompi-shm" [reduce_scatter]="hetccl ompi-shm")
for pass in $(seq 1 "$PASSES"); do
  for n in $NS; do
    for coll in all_reduce all_gather reduce_scatter; do
      read -r -a libs <<<"${LIBS[$coll]}"
      k=$(( (pass - 1) % ${#libs[@]} ))
      order=("${libs[@]:k}" "${libs[@]:0:k}")
      for lib in "${order[@]}"; do
        t0=$(date +%s)
        run_one "$pass" "$coll" "$lib" "$n"
        log "   pass $pass/$PASSES n=$n $coll $lib: $(( $(date +%s) - t0 )) s"
      done
    done
  done
done

# ---- 3. network namespaces ----
NETNS_NOTE=""
ns_ok=no
if [ $netns_mode != no ] && [ -z "$GROUPS_NETNS" ]; then
  NETNS_NOTE="namespace part skipped: no size in NETNS_MIN..SIZES_MAX"; netns_mode=skip
fi
if [ $netns_mode = yes ] || [ $netns_mode = auto ]; then
  tag=hcb$$
  nsa=${tag}a nsb=${tag}b
  ns_cleanup() { ip netns del "$nsa" 2>/dev/null || true; ip netns del "$nsb" 2>/dev/null || true; }
  trap ns_cleanup EXIT
  trap 'exit 130' INT TERM
  if ip netns add "$nsa" 2>/dev/null && ip netns add "$nsb" &&
     ip link add "v$nsa" type veth peer name "v$nsb" &&
     ip link set "v$nsa" netns "$nsa" && ip link set "v$nsb" netns "$nsb" &&
     # 10.214.0.0/24: a private range used only on this veth pair, inside these namespaces
     ip -n "$nsa" addr add 10.214.0.1/24 dev "v$nsa" && ip -n "$nsb" addr add 10.214.0.2/24 dev "v$nsb" &&
     ip -n "$nsa" link set lo up && ip -n "$nsb" link set lo up &&
     ip -n "$nsa" link set "v$nsa" up && ip -n "$nsb" link set "v$nsb" up; then
    ns_ok=yes
  else
    NETNS_NOTE="network namespaces not available here (ip netns failed): socket-between-namespaces part skipped"
    ns_cleanup
    [ $netns_mode = yes ] && { echo "compare.sh: --netns: $NETNS_NOTE" >&2; exit 1; }
  fi
fi
if [ $netns_mode = no ]; then NETNS_NOTE="namespace part skipped (--no-netns)"; fi

veth_tx() { ip -n "$nsa" -s -j link show "v$nsa" | $PY -c 'import json,sys; print(json.load(sys.stdin)[0]["stats64"]["tx"]["bytes"])'; }
declare -A VETH_MIB=([hetccl-netns]=0 [ompi-tcp-netns]=0)
if [ $ns_ok = yes ]; then
  # The plm_rsh_agent: "agent HOST COMMAND..." runs COMMAND in HOST's namespace.
  cat >"$WORK/ns_agent.sh" <<EOF
#!/bin/sh
host=\$1; shift
case "\$host" in 10.214.0.1) ns=$nsa ;; 10.214.0.2) ns=$nsb ;; *) echo "ns_agent: unknown host \$host" >&2; exit 1 ;; esac
exec ip netns exec "\$ns" unshare --uts /bin/sh -c "hostname \$ns; \$*"
EOF
  chmod +x "$WORK/ns_agent.sh"
  printf '10.214.0.1 slots=1\n10.214.0.2 slots=1\n' >"$WORK/ns_hosts"
  secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')

  run_netns() { # pass lib
    local pass=$1 lib=$2 out=$WORK/ns.out rc=0 before after
    : >"$out"
    before=$(veth_tx)
    if [ $lib = hetccl-netns ]; then
      local g lo hi it port r ns pids=()
      for g in ${GROUPS_NETNS//,/ }; do
        lo=${g%%-*}; hi=${g#*-}; it=${hi#*x}; hi=${hi%x*}
        port=$((20000 + RANDOM % 20000)) pids=()
        for r in 0 1; do
          ns=$nsa; [ $r = 1 ] && ns=$nsb
          ip netns exec "$ns" env MASTER_ADDR=10.214.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 \
            HETCCL_SECRET="$secret" HETCCL_SOCKET_IFNAME="v$ns" HETCCL_TIMEOUT=120 \
            timeout "$RUN_TIMEOUT" "$PERF" all_reduce -b "$lo" -e "$hi" -f 4 -c 0 -n "$it" -w "$WARMUP" \
            >"$WORK/ns.$r.out" 2>"$WORK/ns.$r.err" &
          pids+=($!)
        done
        wait "${pids[0]}" || rc=$?
        wait "${pids[1]}" || rc=$?
        cat "$WORK/ns.0.out" >>"$out"
        [ $rc = 0 ] || break
      done
    else
      timeout "$RUN_TIMEOUT" ip netns exec "$nsa" unshare --uts /bin/sh -c "hostname $nsa; exec mpirun \
        --allow-run-as-root --bind-to none --hostfile $WORK/ns_hosts --map-by node \
        --mca plm_rsh_agent $WORK/ns_agent.sh --mca pml ob1 --mca btl tcp,self \
        --mca btl_tcp_if_include 10.214.0.0/24 --mca oob_tcp_if_include 10.214.0.0/24 \
        -n 2 $MPIB all_reduce -G $GROUPS_NETNS -f 4 -w $WARMUP" >"$out" 2>"$WORK/ns.err" || rc=$?
    fi
    after=$(veth_tx)
    VETH_MIB[$lib]=$(( ${VETH_MIB[$lib]} + ((after - before) >> 20) ))
    collect netns "$pass" all_reduce "$lib" 2 <"$out"
    if [ $rc != 0 ]; then
      failures+=("pass $pass netns $lib: exit $rc")
      log "   FAILED (netns $lib, exit $rc)"
    fi
  }
  log "== namespace part: $nsa <-> $nsb over veth v$nsa/v$nsb (10.214.0.1 <-> 10.214.0.2), all_reduce $(human "$nsmin")..$(human "$smax"), 2 ranks"
  for pass in $(seq 1 "$PASSES"); do
    order=(hetccl-netns ompi-tcp-netns)
    (( pass % 2 == 0 )) && order=(ompi-tcp-netns hetccl-netns)
    for lib in "${order[@]}"; do
      t0=$(date +%s)
      run_netns "$pass" "$lib"
      log "   pass $pass/$PASSES netns $lib: $(( $(date +%s) - t0 )) s"
    done
  done
  NETNS_NOTE="veth $nsa->$nsb bytes sent by rank 0's side over all passes: hetccl-netns ${VETH_MIB[hetccl-netns]} MiB, ompi-tcp-netns ${VETH_MIB[ompi-tcp-netns]} MiB"
  ns_cleanup
  trap - EXIT
fi

# ---- 4. tables, files, plot ----
stamp=$(date +%Y%m%d-%H%M%S)
TXT=$RESULTS/compare-$stamp.txt CSV=$RESULTS/compare-$stamp.csv PNG=$RESULTS/allreduce.png
wall=$(( $(date +%s) - t_start ))
commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=""; [ -n "$(git -C "$ROOT" status --porcelain -uno 2>/dev/null)" ] && dirty=" (+ uncommitted changes in the work tree)"
{
  echo "# hetccl vs Open MPI vs Gloo on CPU, $(date -u '+%Y-%m-%d %H:%M UTC'), host $(hostname), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "# hetccl $commit$dirty; $(mpirun --version 2>/dev/null | head -1); torch $($PY -c 'import torch; print(torch.__version__)' 2>/dev/null) (gloo)"
  echo "# float32, sum; busbw in GB/s (1e9 B/s) with nccl-tests' factors; median over $PASSES passes"
  echo "# iterations per size: $ITER_TEXT(TARGET_BYTES=$TARGET_BYTES clamped to [$MIN_ITERS,$MAX_ITERS]); warm-up $WARMUP; one untimed op + barrier before each timed loop"
  echo "# hetccl: out-of-place column of hetccl-perf; ompi-shm: Open MPI defaults (ob1/vader); ompi-tcp: --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo; gloo: torch.distributed gloo, in place"
  echo "# mpirun --oversubscribe --bind-to none (Open MPI busy-polls unless oversubscribed, i.e. at 2 ranks on 2 cores)"
  load_end=$(cut -d" " -f1-3 /proc/loadavg)
  echo "# load average (1/5/15 min) at the start: $load_start, at the end: $load_end"
  if awk -v a="${load_start%% *}" -v b="${load_end%% *}" -v c="$(nproc)" 'BEGIN { exit !(a > c || b > c) }'; then
    echo "# WARNING: other work was running (load above $(nproc)); medians damp it, but busy-polling libraries suffer most"
  fi
  echo "# $TCP_CHECK"
  [ -n "$NETNS_NOTE" ] && echo "# $NETNS_NOTE"
  echo "# wall time of compare.sh: ${wall} s"
  $PY - "$RAW" "$CSV" "$WORK/plot" <<'PYEOF'
import csv, statistics, sys, os
raw, out_csv, plotdir = sys.argv[1:4]
rows = list(csv.DictReader(open(raw)))
vals = {}
for r in rows:
    key = (r["part"], r["coll"], r["lib"], int(r["n"]), int(r["size"]))
    vals.setdefault(key, []).append(float(r["busbw"]))
med = {k: statistics.median(v) for k, v in vals.items()}
def human(b):
    for unit, sh in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << sh and b % (1 << sh) == 0:
            return "%d%s" % (b >> sh, unit)
    return str(b)
noisy = {k for k, v in vals.items() if len(v) > 1 and min(v) > 0 and max(v) / min(v) > 2}
def fmt_bw(v, key=None):
    if v is None:
        return "-"
    return ("%.3f" % v if v >= 0.1 else "%.2g" % v) + ("~" if key in noisy else " ")
def ratio(a, b):
    if a is None or b is None or b <= 0:
        return "%9s" % "-"
    return "%9s" % ("x%.2f" % (a / b))
order = ["hetccl", "ompi-shm", "ompi-tcp", "gloo", "hetccl-netns", "ompi-tcp-netns"]
tables = {}
for (part, coll, lib, n, size) in med:
    tables.setdefault((part, coll, n), set()).add(lib)
def sort_key(t):
    part, coll, n = t
    return (part != "local", ["all_reduce", "all_gather", "reduce_scatter"].index(coll), n)
with open(out_csv, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["part", "coll", "lib", "n", "size", "busbw_median_GBps", "passes", "busbw_per_pass"])
    for k in sorted(vals, key=lambda k: (k[0], k[1], order.index(k[2]) if k[2] in order else 99, k[3], k[4])):
        w.writerow(list(k) + ["%.4f" % med[k], len(vals[k]), " ".join("%.4f" % v for v in vals[k])])
for t in sorted(tables, key=sort_key):
    part, coll, n = t
    libs = [l for l in order if l in tables[t]]
    base = libs[0]
    others = libs[1:]
    sizes = sorted({k[4] for k in med if k[:2] == (part, coll) and k[3] == n})
    title = "%s, %d ranks%s" % (coll, n, " (one rank per network namespace, socket over veth)" if part == "netns" else "")
    print()
    print("## " + title + ": busbw GB/s, and %s / other" % base)
    cw = max(10, max(len(l) for l in libs) + 2)
    rw = max(10, max(len(o) for o in others) + 5) if others else 10
    print("%6s" % "size" + "".join("%*s" % (cw, l) for l in libs) + "".join("%*s" % (rw, "vs " + o) for o in others))
    for s in sizes:
        v = {l: med.get((part, coll, l, n, s)) for l in libs}
        line = "%6s" % human(s) + "".join("%*s" % (cw, fmt_bw(v[l], (part, coll, l, n, s))) for l in libs)
        line += "".join("%*s" % (rw, ratio(v[base], v[o]).strip()) for o in others)
        print(line)
    if part == "netns":
        verdict = []
        for s in sizes:
            a, b = med.get((part, coll, base, n, s)), med.get((part, coll, "ompi-tcp-netns", n, s))
            if s >= 16 << 20 and a and b:
                verdict.append("%s x%.2f %s" % (human(s), a / b, "met" if a / b >= 1.5 else "NOT met"))
        if verdict:
            print("issue target (socket between namespaces: all-reduce >= x1.5 Open MPI TCP at >= 16M): " + ", ".join(verdict))
print()
print("~ : the passes of this value differ by more than 2x (max/min); see the .csv for each pass")
# plot data: one file per (part, lib, n) for all_reduce
os.makedirs(plotdir, exist_ok=True)
series = []
for (part, coll, n) in sorted(tables, key=sort_key):
    if coll != "all_reduce":
        continue
    for l in [l for l in order if l in tables[(part, coll, n)]]:
        fn = os.path.join(plotdir, "%s-n%d.dat" % (l, n))
        with open(fn, "w") as f:
            for s in sorted({k[4] for k in med if k[:3] == (part, coll, l) and k[3] == n}):
                f.write("%d %.6f\n" % (s, med[(part, coll, l, n, s)]))
        series.append((l, n, fn))
with open(os.path.join(plotdir, "series.txt"), "w") as f:
    for l, n, fn in series:
        f.write("%s %d %s\n" % (l, n, fn))
PYEOF
  if [ ${#failures[@]} -gt 0 ]; then
    echo
    echo "# problems:"
    printf '#   %s\n' "${failures[@]}"
  fi
} | tee "$TXT"

# gnuplot: colour per library, dashed for 4 ranks
declare -A COLOR=([hetccl]='#d62728' [ompi-shm]='#1f77b4' [ompi-tcp]='#2ca02c' [gloo]='#9467bd' [hetccl-netns]='#ff7f0e' [ompi-tcp-netns]='#17becf')
plot_cmds=()
while read -r lib n fn; do
  dt=1; pt=7; [ "$n" = 4 ] && { dt=2; pt=5; }
  plot_cmds+=("'$fn' using 1:2 with linespoints lw 2 dt $dt pt $pt ps 0.8 lc rgb '${COLOR[$lib]:-#000000}' title '$lib, $n ranks'")
done <"$WORK/plot/series.txt"
term="pngcairo size 1200,750 font 'sans,10'"
gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1 || term="png size 1200,750"
{
  echo "set terminal $term"
  echo "set output '$PNG'"
  echo "set title 'all-reduce, float32 sum, CPU ($(nproc) cores): bus bandwidth (log scale), median over $PASSES pass(es), $stamp'"
  echo "set logscale x 2"
  echo "set xrange [3000:360000000]"
  echo "set xtics ('4K' 4096, '16K' 16384, '64K' 65536, '256K' 262144, '1M' 1048576, '4M' 4194304, '16M' 16777216, '64M' 67108864, '256M' 268435456, '1G' 1073741824)"
  echo "set xlabel 'message size (bytes)'"
  echo "set ylabel 'busbw (GB/s)'"
  echo "set logscale y 10"
  echo "set format y '%g'"
  echo "set grid"
  echo "set key outside right top"
  (IFS=,; echo "plot ${plot_cmds[*]}")
} >"$WORK/plot.gp"
gnuplot "$WORK/plot.gp" 2>"$WORK/gnuplot.err" || log "gnuplot failed: $(cat "$WORK/gnuplot.err")"

echo
echo "results: $TXT"
echo "         $CSV"
echo "plot:    $PNG"
echo "logs and raw per-pass rows: $WORK (raw.csv)"
[ ${#failures[@]} -eq 0 ] || exit 1
