#!/usr/bin/env bash
# On the GPU machine: which of hetccl's exports the real NCCL binds to. When
# torch has loaded its NCCL globally before hetccl opens it (the wheel
# does), NCCL's calls to its own nccl* names land in hetccl, which must hand
# each back to NCCL (docs/nccl-abi.md, NCCL's calls to its own names): the
# script lists them and fails for any whose entry point in src/abi/nccl.c has
# no RETURN_IF_VENDOR_*. World size 1.
#   BUILD_DIR=build-gpu tests/torch/bindings.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
out=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 HETCCL_TIMEOUT=${HETCCL_TIMEOUT:-20}
LD_DEBUG=bindings LD_DEBUG_OUTPUT=$out/bind LD_PRELOAD=$build/nccl/libhetccl.so timeout 120 \
  "$build/tools/hetccl-run" -n 1 --timeout 100 python3 "$root/tests/torch/ops.py" 2>&1 | grep -E "PASS|FAIL|WARN" | head -8
echo "-- symbols the real libnccl.so.2 binds to hetccl:"
names=$(cat "$out"/bind.* | grep -E "binding file [^ ]*/libnccl\.so\.2 .* to [^ ]*libhetccl" |
  grep -oE "symbol \`[^']+'" | sed "s/symbol \`//; s/'//" | sort -u)
rm -rf "$out"
fail=0
for s in $names; do
  if grep -A3 "^NCCL_API([^,]*, $s," "$root/src/abi/nccl.c" | grep -q RETURN_IF_VENDOR; then
    echo "  $s: handed back"
  else
    echo "  $s: NOT handed back to NCCL"
    fail=1
  fi
done
exit $fail
