#!/usr/bin/env bash
# Bad HETCCL_* names and values, and NCCL_* stand-ins, against real programs
# run as child processes: hetccl-info (parameters only) and a 2-rank
# all-reduce under hetccl-run (a comm init). Each case must end within its
# deadline (a hang is a failure: init once deadlocked on any bad variable),
# with the expected exit status, and print the expected line.
#   check_params_env.sh HETCCL-INFO HETCCL-RUN HETCCL-PERF
# Variable names are spelled ${P}_NAME so that tests/unit/check_params.sh,
# which lists every HETCCL_ name the tree mentions, does not take the
# misspellings here for variables in use.
set -uo pipefail
info=$1 run=$2 perf=$3
P=HETCCL
DEADLINE=30 # seconds per case: generous; a healthy case takes well under one
fail=0 n=0
coll=("$run" -n 2 --timeout 60 "$perf" all_reduce -b 8 -e 8 -n 1 -w 0 -c 1)

# check NAME WANT_RC WANT_REGEX NOT_REGEX PROGRAM -- ENV...
check() {
  local name=$1 want_rc=$2 want=$3 unwanted=$4 prog=$5
  shift 5
  [ "$1" = -- ] && shift
  local cmd
  case $prog in
  info) cmd=("$info") ;;
  coll) cmd=("${coll[@]}") ;;
  esac
  n=$((n + 1))
  local out rc
  out=$(env -u HETCCL_DEBUG -u HETCCL_TIMEOUT "$@" timeout -k 5 $DEADLINE "${cmd[@]}" 2>&1)
  rc=$?
  local why=""
  if [ $rc = 124 ] || [ $rc = 137 ]; then why="hung: no exit within ${DEADLINE} s"
  elif [ "$want_rc" = nonzero ] && [ $rc = 0 ]; then why="exit status 0, expected non-zero"
  elif [ "$want_rc" != nonzero ] && [ $rc != "$want_rc" ]; then why="exit status $rc, expected $want_rc"
  elif ! grep -qE -- "$want" <<<"$out"; then why="no line matches: $want"
  elif [ -n "$unwanted" ] && grep -qE -- "$unwanted" <<<"$out"; then why="a line matches what must not appear: $unwanted"
  fi
  if [ -n "$why" ]; then
    echo "FAIL $name: $why"
    echo "  reproduce: env $* ${cmd[*]}"
    sed 's/^/  | /' <<<"$out" | tail -20
    fail=1
  else
    echo "ok   $name (exit $rc)"
  fi
}

accepts_int='expected an integer from 1 to 1000000000'
# Misspelled and unknown names: one WARN, the program runs.
check typo_timeout 0 "unknown variable ${P}_TIMOUT ignored; did you mean ${P}_TIMEOUT\?" "" info -- "${P}_TIMOUT=10"
check typo_shm_disable 0 "unknown variable ${P}_SHM_DISABEL ignored; did you mean ${P}_SHM_DISABLE\?" "" info -- "${P}_SHM_DISABEL=1"
check unknown_foo 0 "unknown variable ${P}_FOO ignored; no known variable is close" "" info -- "${P}_FOO=1"
# Malformed or out-of-range values: init fails naming variable, value, what is accepted.
check timeout_abc 2 "${P}_TIMEOUT=\"abc\" is not accepted: $accepts_int" "" info -- "${P}_TIMEOUT=abc"
check timeout_zero 2 "${P}_TIMEOUT=\"0\" is not accepted: $accepts_int" "" info -- "${P}_TIMEOUT=0"
check timeout_negative 2 "${P}_TIMEOUT=\"-1\" is not accepted: $accepts_int" "" info -- "${P}_TIMEOUT=-1"
check timeout_huge 2 "${P}_TIMEOUT=\"99999999999\" is not accepted" "" info -- "${P}_TIMEOUT=99999999999"
check shm_disable_maybe 2 "${P}_SHM_DISABLE=\"maybe\" is not accepted: expected a boolean \(1, 0, true" "" info -- "${P}_SHM_DISABLE=maybe"
check chunk_bytes_1Q 2 "${P}_CHUNK_BYTES=\"1Q\" is not accepted: expected a size" "" info -- "${P}_CHUNK_BYTES=1Q"
check chunk_bytes_zero 2 "${P}_CHUNK_BYTES=\"0\" is not accepted: expected a size .* of at least 1" "" info -- "${P}_CHUNK_BYTES=0"
check debug_loud 2 "${P}_DEBUG=\"LOUD\" is not accepted: expected one of NONE, WARN, INFO, TRACE" "" info -- "${P}_DEBUG=LOUD"
check spin_negative 2 "${P}_SPIN_US=\"-5\" is not accepted: expected an integer from 0 to" "" info -- "${P}_SPIN_US=-5"
check typo_and_bad_value 2 "${P}_TIMEOUT=\"abc\" is not accepted" "" info -- "${P}_TIMOUT=10" "${P}_TIMEOUT=abc"
check debug_lowercase 0 "${P}_DEBUG set to info" "" info -- "${P}_DEBUG=info"
# The same through a comm init: every rank fails init, the run ends.
check coll_timeout_abc nonzero "hetcclCommInitFromEnv failed: invalid usage: ${P}_TIMEOUT=\"abc\" is not accepted" "" coll -- "${P}_TIMEOUT=abc"
check coll_timeout_zero nonzero "${P}_TIMEOUT=\"0\" is not accepted" "" coll -- "${P}_TIMEOUT=0"
check coll_typo 0 "did you mean ${P}_TIMEOUT\?" "" coll -- "${P}_TIMOUT=10"
# HETCCL_ALGO: a collective without the named algorithm fails init listing
# the ones it has; a per-collective choice reaches the planner (8 bytes on
# CPU ranks: one step unless forced).
check coll_algo_refused nonzero "${P}_ALGO=allreduce:tree: AllReduce has no algorithm TREE; it has HIER, ONESTEP, DIRECT, RING, RD" \
  "" coll -- "${P}_ALGO=allreduce:tree"
check coll_algo_forced 0 "AllReduce count 2 .*: RING," "AllReduce count 2 .*: ONESTEP," coll -- "${P}_ALGO=broadcast:tree,allreduce:ring" \
  "${P}_DEBUG=TRACE" "${P}_DEBUG_SUBSYS=PLAN"

# NCCL_* stand-ins: read when the HETCCL_* name is unset, HETCCL_* wins.
check nccl_debug_info 0 "${P}_DEBUG unset: taken from NCCL_DEBUG=INFO" "" info -- NCCL_DEBUG=INFO
check nccl_debug_version 0 "NCCL_DEBUG=\"VERSION\" ignored: ${P}_DEBUG .* accepts one of NONE, WARN, INFO, TRACE" "" info -- NCCL_DEBUG=VERSION
check nccl_debug_loses 0 "^hetccl [0-9]" "taken from NCCL_DEBUG| INFO " info -- "${P}_DEBUG=WARN" NCCL_DEBUG=INFO
check nccl_ib_timeout_bad 0 "NCCL_IB_TIMEOUT=\"abc\" ignored" "" info -- NCCL_IB_TIMEOUT=abc
# The stand-in reaches the code that uses it: a socket comm over the
# interface NCCL_SOCKET_IFNAME names, and the error names NCCL's variable.
check nccl_ifname_used 0 "socket: 0 <-> 1 up via lo" "" coll -- NCCL_SOCKET_IFNAME=lo NCCL_SHM_DISABLE=1 \
  "${P}_DEBUG=INFO" "${P}_DEBUG_SUBSYS=NET,ENV"
check nccl_ifname_bad nonzero "no usable interface: NCCL_SOCKET_IFNAME=\"hc_none9\"" "" coll -- NCCL_SOCKET_IFNAME=hc_none9
check nccl_ifname_loses 0 "socket: 0 <-> 1 up via lo" "" coll -- NCCL_SOCKET_IFNAME=hc_none9 "${P}_SOCKET_IFNAME=lo" \
  "${P}_SHM_DISABLE=1" "${P}_DEBUG=INFO" "${P}_DEBUG_SUBSYS=NET"

[ $fail = 0 ] && echo "params_env: $n cases, each ended in time with the expected status and message"
exit $fail
