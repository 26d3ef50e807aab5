#!/usr/bin/env bash
# Waits that say who is missing (real processes under hetccl-run, about 13 s):
#  missing: rank 1 of 3 never joins; within HETCCL_TIMEOUT=12 the root logs
#           every 10 s which ranks are missing, rank 2 (waiting on the root)
#           logs the same, and at the deadline every rank fails naming rank 1;
#  noroot:  rank 0 never starts, so the root never listens; rank 1 logs
#           every 10 s that the root at its address has not answered, then
#           fails at the deadline naming HETCCL_TIMEOUT.
# Each run has a deadline of its own (hetccl-run --timeout 60: a hang fails).
#   check_bootstrap_waits.sh HETCCL-RUN HETCCL-PERF
set -uo pipefail
run=$1 perf=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
coll="$perf all_reduce -b 8 -e 8 -n 1 -w 0 -c 1"
HETCCL_TIMEOUT=12 "$run" -n 3 --timeout 60 -- sh -c \
  "if [ \"\$RANK\" = 1 ]; then sleep 14; exit 0; fi; exec $coll" >"$tmp/missing" 2>&1 &
a=$!
HETCCL_TIMEOUT=12 "$run" -n 2 --timeout 60 -- sh -c \
  "if [ \"\$RANK\" = 0 ]; then sleep 14; exit 0; fi; exec $coll" >"$tmp/noroot" 2>&1 &
b=$!
wait $a; rc_a=$?
wait $b; rc_b=$?
fail=0
expect() { # FILE RC WANT_RC REGEX...
  local f=$1 rc=$2 want=$3
  shift 3
  if [ "$rc" = 124 ]; then echo "FAIL $f: hung (hetccl-run --timeout)"; fail=1; fi
  if [ "$want" = nonzero ] && [ "$rc" = 0 ]; then echo "FAIL $f: exit status 0, expected a failure"; fail=1; fi
  for re in "$@"; do
    if grep -qE -- "$re" "$tmp/$f"; then echo "ok   $f: $re"
    else echo "FAIL $f: no line matches: $re"; fail=1; fi
  done
  [ $fail = 0 ] || sed 's/^/  | /' "$tmp/$f" | tail -30
}
expect missing $rc_a nonzero \
  'WARN BOOT .*bootstrap root [^ ]+: after 1[0-9] s, 2 of 3 ranks arrived; missing: 1; waiting [0-9]+ s more \(HETCCL_TIMEOUT\)' \
  '\[2\] .*bootstrap rank 2 of 3: the root [^ ]+ is waiting: after 1[0-9] s, 2 of 3 ranks arrived; missing: 1' \
  'bootstrap rank [02] of 3: .*rendezvous timed out \(HETCCL_TIMEOUT, 12 s\): 2 of 3 ranks arrived; missing: 1'
expect noroot $rc_b nonzero \
  '\[1\] .*WARN .*the bootstrap root [^ ]+ has not answered for 1[0-9] s \(Connection refused; not started yet\?\); retrying for [0-9]+ s more \(HETCCL_TIMEOUT\)' \
  '\[1\] .*connect to the bootstrap root [^ ]+: timed out \(HETCCL_TIMEOUT\)'
[ $fail = 0 ] && echo "bootstrap_waits: both runs said who was missing and ended at HETCCL_TIMEOUT"
exit $fail
