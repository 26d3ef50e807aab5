#!/usr/bin/env bash
# ctest ib_two_vms: tests/ib/guest_coll.sh in two soft-RoCE VMs, two ranks
# in each. Exit 0 / 1, or 77 when the VMs cannot be booted here.
#   tests/ib/test_two_vms.sh BUILD_DIR [RANKS_PER_VM] [CASES...]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "$1" && pwd)
per_vm=${2:-2}
shift $(($# >= 2 ? 2 : 1))
[ -x "$build/tools/hetccl-perf" ] || { echo "no hetccl-perf in $build"; exit 1; }
secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
rc=0
"$here/rxe_vms.sh" "$here/guest_coll.sh" "$build" "$secret" "$per_vm" "$@" || rc=$?
[ $rc = 77 ] && exit 77
if [ $rc = 0 ]; then
  echo "two VMs: every collective correct over ib; fault cases ended in clean errors"
  exit 0
fi
echo "FAIL: rerun with: tests/ib/test_two_vms.sh $build $per_vm $*"
exit 1
