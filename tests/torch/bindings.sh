#!/usr/bin/env bash
# On the GPU machine: which of hetccl's exports the real NCCL (loaded
# privately for pass-through) binds to; there should be none. World size 1.
#   BUILD_DIR=build-gpu tests/torch/bindings.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
out=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 HETCCL_TIMEOUT=${HETCCL_TIMEOUT:-20}
LD_DEBUG=bindings LD_DEBUG_OUTPUT=$out/bind LD_PRELOAD=$build/nccl/libhetccl.so timeout 120 \
  "$build/tools/hetccl-run" -n 1 --timeout 100 python3 "$root/tests/torch/ops.py" 2>&1 | grep -E "PASS|FAIL|WARN" | head -8
echo "-- symbols the real libnccl.so.2 binds to hetccl:"
cat "$out"/bind.* | grep -E "binding file [^ ]*/libnccl\.so\.2 .* to [^ ]*libhetccl" | grep -oE "symbol \`[^']+'" | sort | uniq -c
rm -rf "$out"
