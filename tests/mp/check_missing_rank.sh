#!/usr/bin/env bash
# A rank that never joins the rendezvous (killed before it got there, as in
# tests/chaos/gpu.sh's kill-before-join tries): every other rank must be
# out, failing, within one HETCCL_TIMEOUT and a margin, with the
# rendezvous's own verdict; no second full wait stacked after the first.
# Real processes under hetccl-run, whose --timeout is the hang detector
# (HETCCL_TIMEOUT + MARGIN_S, less than twice HETCCL_TIMEOUT, so a wait
# that followed the rendezvous's with a deadline of its own is caught):
#  missing: rank 2 of 3 never joins; ranks 0 and 1 fail naming rank 2;
#  noroot:  rank 0 (the root) never starts; rank 1 fails naming the root.
#   check_missing_rank.sh HETCCL-RUN HETCCL-PERF
set -uo pipefail
run=$1 perf=$2
timeout_s=${WAIT_S:-6}
margin_s=${MARGIN_S:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
coll="$perf all_reduce -b 8 -e 8 -n 1 -w 0 -c 1"
limit=$((timeout_s + margin_s))
# The missing rank sleeps past the limit: hetccl-run ends it when a
# survivor fails, so only survivors that wait too long reach --timeout.
# A survivor lingers 2 s after its failure before it exits: hetccl-run
# terminates the others as soon as one exits, and the other survivor,
# told by the root, may not have printed its own verdict yet.
HETCCL_TIMEOUT=$timeout_s "$run" -n 3 --timeout $limit -- sh -c \
  "if [ \"\$RANK\" = 2 ]; then sleep $((limit + 5)); exit 0; fi; $coll; rc=\$?; sleep 2; exit \$rc" >"$tmp/missing" 2>&1 &
a=$!
HETCCL_TIMEOUT=$timeout_s "$run" -n 2 --timeout $limit -- sh -c \
  "if [ \"\$RANK\" = 0 ]; then sleep $((limit + 5)); exit 0; fi; exec $coll" >"$tmp/noroot" 2>&1 &
b=$!
wait $a; rc_a=$?
wait $b; rc_b=$?
fail=0
expect() { # FILE RC REGEX...
  local f=$1 rc=$2 bad=0
  shift 2
  if [ "$rc" = 124 ]; then echo "FAIL $f: a survivor still ran after HETCCL_TIMEOUT=$timeout_s + ${margin_s} s"; bad=1; fi
  if [ "$rc" = 0 ]; then echo "FAIL $f: exit status 0, expected a failure"; bad=1; fi
  for re in "$@"; do
    if grep -qE -- "$re" "$tmp/$f"; then echo "ok   $f: $re"
    else echo "FAIL $f: no line matches: $re"; bad=1; fi
  done
  [ $bad = 0 ] || { sed 's/^/  | /' "$tmp/$f" | tail -30; fail=1; }
}
expect missing $rc_a \
  "\[0\] .*rendezvous timed out \(HETCCL_TIMEOUT, $timeout_s s\): 2 of 3 ranks arrived; missing: 2" \
  "\[1\] .*rendezvous timed out \(HETCCL_TIMEOUT, $timeout_s s\): 2 of 3 ranks arrived; missing: 2"
expect noroot $rc_b \
  '\[1\] .*connect to the bootstrap root [^ ]+: timed out \(HETCCL_TIMEOUT\)'
[ $fail = 0 ] && echo "missing_rank: every survivor failed within HETCCL_TIMEOUT=$timeout_s + ${margin_s} s, naming who was missing"
exit $fail
