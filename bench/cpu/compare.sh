#!/usr/bin/env bash
# bench/cpu/compare.sh: hetccl against Open MPI (and Gloo) on the CPU of one
# machine, with one command, on Debian, from a clean clone.
#
#   bench/cpu/compare.sh [--netns | --no-netns] [--no-install]
#
# 1. Installs what is missing from Debian (openmpi-bin libopenmpi-dev
#    python3-torch gnuplot-nox, plus build-essential cmake iproute2 procps when
#    absent; one quiet apt-get update; needs root), builds hetccl-perf and
#    hetccl-run (RelWithDebInfo) into $BUILD_DIR (default build-bench), and
#    compiles bench/cpu/mpi_bench.c with mpicc into $BUILD_DIR/bench-cpu/.
#    --no-install (no network, e.g. the GPU machine): installs nothing and
#    uses what is there: mpicc and mpirun are required, Gloo runs only when
#    python3 can import torch with gloo, the plot as an SVG where gnuplot
#    is missing (each skip is said in the results).
# 2. Local part, rank counts NS (default: those of 2 4 8 16 that fit the
#    cores), float32 sum, sizes SIZES_MIN, x4 ... up to SIZES_MAX (and
#    SIZES_MAX itself; default 8 B .. 256 MiB), collectives COLLS (default
#    all_reduce all_gather reduce_scatter broadcast), libraries LIBS
#    (default hetccl ompi-shm ompi-tcp gloo; ompi-tcp and gloo run
#    all_reduce only):
#    hetccl   = hetccl-run -n N --bind core hetccl-perf COLL -b .. -e .. -f 4 -c 0 -n ITERS -w W
#               (its out-of-place time column; for broadcast its in-place
#               one, as MPI_Bcast and torch.distributed.broadcast work, with
#               the out-of-place time beside it as hetccl-oop; local ranks
#               use whatever transport hetccl picks)
#    ompi-shm = mpirun --allow-run-as-root --use-hwthread-cpus --map-by hwthread
#               --bind-to hwthread -n N
#               mpi_bench (Open MPI's defaults: pml ob1, btl vader, i.e. shared
#               memory with CMA single copy)
#    ompi-tcp = the same plus --mca pml ob1 --mca btl tcp,self
#               --mca btl_tcp_if_include lo (checked before the passes: the
#               loopback byte counters must grow by at least the bytes sent)
#    gloo     = bench/cpu/gloo_bench.py: torch.distributed, gloo backend,
#               CPU tensors, ranks from torch.multiprocessing, env:// on
#               127.0.0.1 (gloo's all_reduce is in place)
#    Ranks own their cores: with N <= cores, rank r of every library runs
#    only on the r-th CPU (hetccl-run --bind core; mpirun --bind-to hwthread,
#    rank r on the r-th hardware thread, which is the same CPU);
#    with more ranks than cores nothing is bound (mpirun --oversubscribe)
#    and the results say so. BIND=none turns binding off.
#    Every benchmark times the same way (nccl-tests' method, see
#    shared/reference/nccl-tests.md and the comment in mpi_bench.c): per size
#    W warm-up ops, one untimed op, a barrier, ITERS ops back to back, time
#    per op averaged over ranks.
#    ITERS(size) = clamp(TARGET_BYTES / size, MIN_ITERS, MAX_ITERS); sizes
#    with equal ITERS are swept by one invocation (one hetccl-perf -b/-e
#    range), and mpi_bench/gloo_bench do exactly the same groups (-G).
#    PASSES passes; each pass runs every (library, collective, n) once at
#    every size, library order rotated per pass; the tables show the median
#    over passes of each (library, n, size).
# 3. Network namespaces (run when `ip netns` works, or forced with --netns;
#    needs root): two namespaces joined by a veth pair (10.214.0.1/24 and
#    .2, nothing else on that link), one rank in each, all_reduce 1M..256M:
#      hetccl-netns   = hetccl-perf with torchrun variables (MASTER_ADDR,
#                       MASTER_PORT, RANK, WORLD_SIZE, HETCCL_SECRET,
#                       HETCCL_SOCKET_IFNAME=<veth>)
#      ompi-tcp-netns = mpirun inside namespace A treating the two
#                       namespaces as two hosts: a plm_rsh_agent wrapper
#                       starts the second orted in namespace B (own UTS
#                       namespace, so its own host name); oob and btl tcp
#                       restricted to 10.214.0.0/24
#    The veth byte counters are reported for each library.
# 4. Prints one table per (collective, n): time per call in us of each
#    library, and each other library's time over hetccl's ("x1.84": above 1,
#    hetccl is faster), writes bench/cpu/results/compare-<date>.txt and .csv
#    and the plot bench/cpu/results/compare.png with gnuplot, else
#    compare.svg (plot_ratio.py): that ratio against Open MPI over size,
#    one panel per collective, a line per n.
#
# Environment: BUILD_DIR, PASSES (3), TARGET_BYTES (67108864), MIN_ITERS (2),
# MAX_ITERS (1000), WARMUP (6: hetccl's first 6 calls of a size class time
# pulls against slot copies, HETCCL_SHM_CMA_TUNE), RUN_TIMEOUT (900 s per invocation),
# SIZES_MIN (8), SIZES_MAX (256M), NETNS_MIN (1M), NS, COLLS, LIBS, BIND.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-bench}
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
PASSES=${PASSES:-3}
TARGET_BYTES=${TARGET_BYTES:-67108864}
MIN_ITERS=${MIN_ITERS:-2}
MAX_ITERS=${MAX_ITERS:-1000}
WARMUP=${WARMUP:-6}
RUN_TIMEOUT=${RUN_TIMEOUT:-900}
SIZES_MIN=${SIZES_MIN:-8}
SIZES_MAX=${SIZES_MAX:-256M}
NETNS_MIN=${NETNS_MIN:-1M}
if [ -z "${NS:-}" ]; then
  NS=""
  for n in 2 4 8 16; do (( n <= $(nproc) || n == 2 )) && NS+="${NS:+ }$n"; done
fi
COLLS=${COLLS:-"all_reduce all_gather reduce_scatter broadcast"}
LIBS=${LIBS:-"hetccl ompi-shm ompi-tcp gloo"}
BIND=${BIND:-core}
PY=$(command -v python3 || echo /usr/bin/python3)
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
if [ "$(id -u)" != 0 ]; then
  if [ $install = 1 ]; then echo "compare.sh: run as root (apt-get), or with --no-install" >&2; exit 2; fi
  [ $netns_mode = auto ] && netns_mode=no
fi

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
  command -v pkill >/dev/null || pkgs+=(procps)
  if [ ${#pkgs[@]} -gt 0 ]; then
    log "== installing from Debian: ${pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
  fi
fi
need=(cmake cc pkill)
[[ " $LIBS " == *" ompi-"* ]] && need+=(mpicc mpirun)
for c in "${need[@]}"; do
  command -v $c >/dev/null || { echo "compare.sh: $c missing (run without --no-install)" >&2; exit 1; }
done
SKIPPED=()
if [[ " $LIBS " == *" gloo "* ]] && ! $PY -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
  LIBS=$(echo " $LIBS " | sed 's/ gloo / /; s/^ *//; s/ *$//')
  SKIPPED+=("gloo: python3 cannot import torch with gloo here")
fi
HAVE_GNUPLOT=yes
if ! command -v gnuplot >/dev/null; then
  HAVE_GNUPLOT=no
  # Without gnuplot the plot is an SVG drawn by plot_ratio.py.
  command -v python3 >/dev/null || SKIPPED+=("plot: neither gnuplot nor python3 is installed")
fi

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
if [[ " $LIBS " == *" ompi-"* ]]; then
  log "== building mpi_bench with mpicc"
  mpicc -O2 -std=c11 -Wall -Wextra -o "$MPIB" "$HERE/mpi_bench.c"
fi
GLOOB=$HERE/gloo_bench.py

# ---- iteration schedule: groups of consecutive sizes with equal ITERS ----
smin=$(to_bytes "$SIZES_MIN") smax=$(to_bytes "$SIZES_MAX") nsmin=$(to_bytes "$NETNS_MIN")
iters_for() { local i=$(( TARGET_BYTES / $1 )); (( i < MIN_ITERS )) && i=$MIN_ITERS; (( i > MAX_ITERS )) && i=$MAX_ITERS; echo $i; }
sizes_from() { # lo hi -> lo, 4 lo, 16 lo ... <= hi, and hi itself
  local s=$1 last=0
  while (( s <= $2 )); do echo $s; last=$s; s=$(( s * 4 )); done
  (( last != $2 && $2 >= $1 )) && echo "$2"
  return 0
}
make_groups() { # lo hi -> "lo-hixIT,..." (bytes): one group per run of x4 steps with equal ITERS
  local out="" glo="" gprev="" git="" s it
  for s in $(sizes_from "$1" "$2"); do
    it=$(iters_for $s)
    if [ -n "$glo" ] && [ "$it" = "$git" ] && (( s == gprev * 4 )); then gprev=$s
    else
      [ -n "$glo" ] && out+="${out:+,}${glo}-${gprev}x${git}"
      glo=$s gprev=$s git=$it
    fi
  done
  [ -n "$glo" ] && out+="${out:+,}${glo}-${gprev}x${git}"
  echo "$out"
}
GROUPS_LOCAL=$(make_groups "$smin" "$smax")
GROUPS_NETNS=$(make_groups "$nsmin" "$smax")
schedule_text() {
  local s out=""
  for s in $(sizes_from "$smin" "$smax"); do out+="$(human $s):$(iters_for $s) "; done
  echo "$out"
}

RAW=$WORK/raw.csv
echo "part,pass,coll,lib,n,size,time_us" >"$RAW"
failures=()

# Rows of an nccl-tests style table on stdin (optionally "[0] " prefixed):
# append "part,pass,coll,lib,n,size,time_us" to $RAW, from the size column
# and a time column (by default the first, out of place), in microseconds. Sizes are the
# printed ones (for all_gather and reduce_scatter nccl-tests' total, which
# can round down to 0 for tiny sizes: those rows are dropped).
collect() { # part pass coll lib n [time column: 6 out of place (default), 10 in place]
  local col=${6:-6}
  sed -e 's/^\[ *[0-9]*\] //' |
    awk -v p="$1,$2,$3,$4,$5" -v c="$col" '$1 ~ /^[0-9]+$/ && $1 + 0 > 0 && NF >= c + 2 && $c + 0 > 0 { printf "%s,%s,%s\n", p, $1, $c }' >>"$RAW"
}

# Every run goes under `timeout`, which puts itself in a process group of
# its own: a signal to this script (a timeout around it, ^C) would leave
# the run going, and spinning ranks would spoil whatever is measured next.
# So a run goes in the background, the script waits for it (a wait, unlike
# a foreground command, lets a trap in at once), and the traps pass the
# signal on to every `timeout` child of the script: timeout forwards it to
# the run, hetccl-run and mpirun to their ranks.
stop_runs() { pkill -TERM -P $$ -x timeout || true; }
trap 'stop_runs; exit 130' INT
trap 'stop_runs; exit 143' TERM
bounded() { # command [args...]: under RUN_TIMEOUT; its status
  timeout "$RUN_TIMEOUT" "$@" &
  wait $!
}

MPIRUN_BASE=(mpirun --allow-run-as-root)
bound() { [ "$BIND" = core ] && (( $1 <= $(nproc) )); } # n
MPI_TCP=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo)

run_one() { # pass coll lib n
  local pass=$1 coll=$2 lib=$3 n=$4 out=$WORK/run.out err=$WORK/run.err rc=0
  local hbind=() MPIRUN=("${MPIRUN_BASE[@]}" --oversubscribe --bind-to none)
  if bound "$n"; then hbind=(--bind core); MPIRUN=("${MPIRUN_BASE[@]}" --use-hwthread-cpus --map-by hwthread --bind-to hwthread); fi
  : >"$out"
  case $lib in
    hetccl)
      local g lo hi it
      for g in ${GROUPS_LOCAL//,/ }; do
        lo=${g%%-*}; hi=${g#*-}; it=${hi#*x}; hi=${hi%x*}
        bounded "$HRUN" -n "$n" "${hbind[@]}" "$PERF" "$coll" -b "$lo" -e "$hi" -f 4 -c 0 \
          -n "$it" -w "$WARMUP" >>"$out" 2>"$err" || { rc=$?; break; }
      done ;;
    ompi-shm)
      bounded "${MPIRUN[@]}" -n "$n" "$MPIB" "$coll" -G "$GROUPS_LOCAL" -f 4 -w "$WARMUP" \
        >"$out" 2>"$err" || rc=$? ;;
    ompi-tcp)
      bounded "${MPIRUN[@]}" "${MPI_TCP[@]}" -n "$n" "$MPIB" "$coll" -G "$GROUPS_LOCAL" -f 4 \
        -w "$WARMUP" >"$out" 2>"$err" || rc=$? ;;
    gloo)
      OMP_NUM_THREADS=1 bounded $PY "$GLOOB" -n "$n" -G "$GROUPS_LOCAL" -f 4 -w "$WARMUP" \
        >"$out" 2>"$err" || rc=$? ;;
  esac
  if [ "$lib" = hetccl ] && [ "$coll" = broadcast ]; then
    # MPI_Bcast (and torch.distributed.broadcast) work in place; hetccl's
    # out-of-place broadcast also copies the root's input to its output.
    collect local "$pass" "$coll" hetccl "$n" 10 <"$out"
    collect local "$pass" "$coll" hetccl-oop "$n" <"$out"
  else
    collect local "$pass" "$coll" "$lib" "$n" <"$out"
  fi
  if [ $rc != 0 ]; then
    failures+=("pass $pass $coll $lib n=$n: exit $rc")
    log "   FAILED ($lib $coll n=$n, exit $rc): $(tail -3 "$err" | tr '\n' ' ')"
  fi
}

# ---- the TCP check for ompi-tcp ----
MPIRUN=("${MPIRUN_BASE[@]}" --oversubscribe --bind-to none)
TCP_CHECK=""
lo_tx() { cat /sys/class/net/lo/statistics/tx_bytes; }
if [[ " $LIBS " == *" ompi-tcp "* ]]; then
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
fi

# ---- 2. local passes ----
ITER_TEXT=$(schedule_text)
log "== local part: PASSES=$PASSES, n in {$NS}, $COLLS, libraries $LIBS, iterations per size: $ITER_TEXT(warm-up $WARMUP)"
libs_for() { # coll -> the libraries of LIBS that run it
  local l out=""
  for l in $LIBS; do
    case $l in ompi-tcp|gloo) [ "$1" = all_reduce ] || continue ;; esac
    out+="${out:+ }$l"
  done
  echo "$out"
}
for pass in $(seq 1 "$PASSES"); do
  for n in $NS; do
    for coll in $COLLS; do
      read -r -a libs <<<"$(libs_for "$coll")"
      [ ${#libs[@]} -gt 0 ] || continue
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
  trap ns_cleanup EXIT # the INT and TERM traps exit, which runs it
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
      bounded ip netns exec "$nsa" unshare --uts /bin/sh -c "hostname $nsa; exec mpirun \
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
TXT=$RESULTS/compare-$stamp.txt CSV=$RESULTS/compare-$stamp.csv PNG=$RESULTS/compare.png
wall=$(( $(date +%s) - t_start ))
commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=""; [ -n "$(git -C "$ROOT" status --porcelain -uno 2>/dev/null)" ] && dirty=" (+ uncommitted changes in the work tree)"
bind_text="ranks bound one per CPU (hetccl-run --bind core, mpirun --use-hwthread-cpus --map-by hwthread --bind-to hwthread) for n <= $(nproc)"
[ "$BIND" = core ] || bind_text="ranks not bound (BIND=$BIND): mpirun --oversubscribe --bind-to none"
{
  echo "# hetccl vs Open MPI on CPU, $(date -u '+%Y-%m-%d %H:%M UTC'), host $(hostname), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "# hetccl $commit$dirty; $(mpirun --version 2>/dev/null | head -1)$([[ " $LIBS " == *" gloo "* ]] && echo "; torch $($PY -c 'import torch; print(torch.__version__)' 2>/dev/null) (gloo)")"
  echo "# float32, sum; time per call in us (out-of-place for hetccl-perf, as mpi_bench; broadcast in place, as MPI_Bcast, with hetccl's out-of-place time as hetccl-oop); median over $PASSES passes"
  echo "# iterations per size: $ITER_TEXT(TARGET_BYTES=$TARGET_BYTES clamped to [$MIN_ITERS,$MAX_ITERS]); warm-up $WARMUP; one untimed op + barrier before each timed loop"
  echo "# libraries: $LIBS; ompi-shm: Open MPI defaults (ob1/vader); ompi-tcp: --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo; gloo: torch.distributed gloo, in place"
  echo "# $bind_text"
  load_end=$(cut -d" " -f1-3 /proc/loadavg)
  echo "# load average (1/5/15 min) at the start: $load_start, at the end: $load_end"
  if awk -v a="${load_start%% *}" -v b="${load_end%% *}" -v c="$(nproc)" 'BEGIN { exit !(a > c || b > c) }'; then
    echo "# WARNING: other work was running (load above $(nproc)); medians damp it, but busy-polling libraries suffer most"
  fi
  [ -n "$TCP_CHECK" ] && echo "# $TCP_CHECK"
  [ -n "$NETNS_NOTE" ] && echo "# $NETNS_NOTE"
  for k in "${SKIPPED[@]}"; do echo "# skipped: $k"; done
  echo "# wall time of compare.sh: ${wall} s"
  $PY - "$RAW" "$CSV" "$WORK/plot" <<'PYEOF'
import csv, statistics, sys, os
raw, out_csv, plotdir = sys.argv[1:4]
rows = list(csv.DictReader(open(raw)))
vals = {}
for r in rows:
    key = (r["part"], r["coll"], r["lib"], int(r["n"]), int(r["size"]))
    vals.setdefault(key, []).append(float(r["time_us"]))
med = {k: statistics.median(v) for k, v in vals.items()}
def human(b):
    for unit, sh in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << sh and b % (1 << sh) == 0:
            return "%d%s" % (b >> sh, unit)
    return str(b)
noisy = {k for k, v in vals.items() if len(v) > 1 and min(v) > 0 and max(v) / min(v) > 2}
def fmt_t(v, key=None):
    if v is None:
        return "-"
    s = "%.2f" % v if v < 100 else "%.1f" % v if v < 1000 else "%.0f" % v
    return s + ("~" if key in noisy else " ")
order = ["hetccl", "hetccl-oop", "ompi-shm", "ompi-tcp", "gloo", "hetccl-netns", "ompi-tcp-netns"]
colls = ["all_reduce", "all_gather", "reduce_scatter", "broadcast"]
tables = {}
for (part, coll, lib, n, size) in med:
    tables.setdefault((part, coll, n), set()).add(lib)
def sort_key(t):
    part, coll, n = t
    return (part != "local", colls.index(coll) if coll in colls else 99, n)
with open(out_csv, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["part", "coll", "lib", "n", "size", "time_us_median", "passes", "time_us_per_pass"])
    for k in sorted(vals, key=lambda k: (k[0], k[1], order.index(k[2]) if k[2] in order else 99, k[3], k[4])):
        w.writerow(list(k) + ["%.4f" % med[k], len(vals[k]), " ".join("%.4f" % v for v in vals[k])])
summary = []
for t in sorted(tables, key=sort_key):
    part, coll, n = t
    libs = [l for l in order if l in tables[t]]
    base, others = libs[0], [l for l in libs[1:] if l != "hetccl-oop"]
    sizes = sorted({k[4] for k in med if k[:2] == (part, coll) and k[3] == n})
    title = "%s, %d ranks%s" % (coll, n, " (one rank per network namespace, socket over veth)" if part == "netns" else "")
    print()
    print("## " + title + ": time per call (us); other / %s = the other's time over %s's (above 1: %s faster)" % (base, base, base))
    cw = max(11, max(len(l) for l in libs) + 3)
    rw = max(12, max(len(o) for o in others) + len(base) + 4) if others else 12
    print("%6s" % "size" + "".join("%*s" % (cw, l) for l in libs) + "".join("%*s" % (rw, o + "/" + base) for o in others))
    below = {o: [] for o in others}
    for s in sizes:
        v = {l: med.get((part, coll, l, n, s)) for l in libs}
        line = "%6s" % human(s) + "".join("%*s" % (cw, fmt_t(v[l], (part, coll, l, n, s))) for l in libs)
        for o in others:
            r = v[o] / v[base] if v[o] and v[base] else None
            line += "%*s" % (rw, "%.2f" % r if r else "-")
            if r is not None and r < 1:
                below[o].append("%s %.2f" % (human(s), r))
        print(line)
    for o in others:
        if sizes:
            summary.append("%s n=%d vs %s: %s" % (coll, n, o, "faster or equal at every size" if not below[o]
                                                   else "slower at " + ", ".join(below[o])))
print()
print("~ : the passes of this value differ by more than 2x (max/min); see the .csv for each pass")
print()
print("summary (hetccl against each library, ratio = its time / hetccl's):")
for line in summary:
    print("  " + line)
# plot data: per (coll, n), the ratio ompi-shm / hetccl over size
os.makedirs(plotdir, exist_ok=True)
series = []
for (part, coll, n) in sorted(tables, key=sort_key):
    if part != "local" or "ompi-shm" not in tables[(part, coll, n)] or "hetccl" not in tables[(part, coll, n)]:
        continue
    fn = os.path.join(plotdir, "%s-n%d.dat" % (coll, n))
    with open(fn, "w") as f:
        for s in sorted({k[4] for k in med if k[:2] == (part, coll) and k[3] == n}):
            h, o = med.get((part, coll, "hetccl", n, s)), med.get((part, coll, "ompi-shm", n, s))
            if h and o:
                f.write("%d %.6f\n" % (s, o / h))
    series.append((coll, n, fn))
with open(os.path.join(plotdir, "series.txt"), "w") as f:
    for coll, n, fn in series:
        f.write("%s %d %s\n" % (coll, n, fn))
PYEOF
  if [ ${#failures[@]} -gt 0 ]; then
    echo
    echo "# problems:"
    printf '#   %s\n' "${failures[@]}"
  fi
} | tee "$TXT"

# gnuplot: one panel per collective, the ratio Open MPI time / hetccl time
# over size, a line per rank count.
if [ $HAVE_GNUPLOT = yes ] && [ -s "$WORK/plot/series.txt" ]; then
  term="pngcairo size 1400,900 font 'sans,10'"
  gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1 || term="png size 1400,900"
  {
    echo "set terminal $term"
    echo "set output '$PNG'"
    echo "set multiplot layout 2,2 title 'Open MPI (vader) time / hetccl time per call, float32, $(nproc) cores, median of $PASSES pass(es), $stamp: above 1 = hetccl faster'"
    echo "set logscale x 2"
    echo "set logscale y 2"
    echo "set format x '%.0s%cB'"
    echo "set xlabel 'message size'"
    echo "set ylabel 'MPI time / hetccl time'"
    echo "set grid"
    echo "set key top left"
    for coll in $COLLS; do
      cmds=()
      while read -r c n fn; do
        [ "$c" = "$coll" ] && cmds+=("'$fn' using 1:2 with linespoints lw 2 pt 7 ps 0.7 title '$n ranks'")
      done <"$WORK/plot/series.txt"
      [ ${#cmds[@]} -gt 0 ] || continue
      echo "set title '$coll'"
      (IFS=,; echo "plot ${cmds[*]}, 1 with lines lc rgb 'black' dt 2 notitle")
    done
    echo "unset multiplot"
  } >"$WORK/plot.gp"
  gnuplot "$WORK/plot.gp" 2>"$WORK/gnuplot.err" || log "gnuplot failed: $(cat "$WORK/gnuplot.err")"
  PLOT_TEXT=$PNG
elif [ -s "$WORK/plot/series.txt" ] && command -v python3 >/dev/null; then
  SVG=$RESULTS/compare.svg
  if python3 "$HERE/plot_ratio.py" "$CSV" "$SVG" \
    "Open MPI time / hetccl time per call, float32, $(nproc) cores, median of $PASSES pass(es), $stamp: above 1 = hetccl faster"; then
    PLOT_TEXT=$SVG
  else
    PLOT_TEXT="none (plot_ratio.py failed)"
  fi
else
  PLOT_TEXT="none (${SKIPPED[*]:-no Open MPI rows to plot})"
fi

echo
echo "results: $TXT"
echo "         $CSV"
echo "plot:    $PLOT_TEXT"
echo "logs and raw per-pass rows: $WORK (raw.csv)"
[ ${#failures[@]} -eq 0 ] || exit 1
