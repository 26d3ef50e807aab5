#!/usr/bin/env bash
# On the GPU machine: ops.py under hetccl with logs, to find where a torch
# run fails or stops. Logs land in $OUT (or /tmp/hetccl-torch-diag).
#   BUILD_DIR=build-gpu tests/torch/diag.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
out=${OUT:-/tmp/hetccl-torch-diag}
mkdir -p "$out"
lib=$build/nccl/libhetccl.so
run=$build/tools/hetccl-run
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export OPS_VERBOSE=1 NCCL_DEBUG=WARN HETCCL_TIMEOUT=${HETCCL_TIMEOUT:-20}
echo "== world 1 under hetccl"
LD_DEBUG=bindings LD_DEBUG_OUTPUT=$out/bind HETCCL_DEBUG=INFO LD_PRELOAD=$lib timeout 120 $run -n 1 --timeout 100 \
  python3 "$root/tests/torch/ops.py" 2>&1 | grep -v "^\[0\] \[rank0\]:  " | tail -14
echo "-- who binds to hetccl's nccl* (not libtorch):"
cat "$out"/bind.* | grep "libhetccl" | grep -v "file .*libtorch_cuda" | grep -oE "binding file [^ ]+ .* to [^ ]+ .*symbol \`[a-zA-Z]+" | sort | uniq -c | sort -rn | head -12
rm -f "$out"/bind.*
echo "== world 2, two groups, under hetccl"
HETCCL_DEBUG=TRACE HETCCL_DEBUG_SUBSYS=ALL HETCCL_DEBUG_FILE=$out/ops2.%p.log LD_PRELOAD=$lib timeout 120 \
  $run -n 2 --timeout 50 --rank-env 0:HETCCL_GROUP=a --rank-env 1:HETCCL_GROUP=b python3 "$root/tests/torch/ops.py" 2>&1 | tail -25
for f in "$out"/ops2.*.log; do echo "-- $f: $(wc -l < "$f") lines"; grep -E "EXEC|WARN" "$f" | tail -8 | cut -c1-220; done
