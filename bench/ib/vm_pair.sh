#!/bin/sh
# bench/ib/pair.sh inside the two VMs of tests/ib/rxe_vms.sh (ROLE a/b,
# MY_IP, PEER_IP, RXE_DEV, GIDX, OUT from the harness); VM a prints the
# report of both halves. Soft-RoCE under CPU emulation: the figures show
# that the comparison runs, nothing about real hardware.
#   tests/ib/rxe_vms.sh bench/ib/vm_pair.sh BUILD_DIR [ITERS] [SIZES...]
here=$(cd "$(dirname "$0")" && pwd)
build=$1 iters=${2:-20}
shift 2 2>/dev/null || shift $#
[ $# -gt 0 ] || set -- 65536 1048576 4194304
# The same secret in both VMs: fixed, as nothing but these two VMs sees it.
"$here/pair.sh" "$ROLE" "$MY_IP" "$PEER_IP" "$RXE_DEV" "$GIDX" "$build" 0123456789abcdef0123456789abcdef "$iters" \
  "$@" >"$OUT/bench.$ROLE.txt" 2>&1
rc=$?
if [ "$ROLE" = a ]; then
  for t in $(seq 120); do [ -s "$OUT/bench.b.txt" ] && [ -e "$OUT/bench.b.done" ] && break; sleep 1; done
  cat "$OUT/bench.a.txt" "$OUT/bench.b.txt" | "$here/report.sh"
  rc=$?
else
  touch "$OUT/bench.b.done"
fi
exit $rc
