#!/usr/bin/env bash
# Everything that needs the GPU machine, in one go (one device call):
# the GPU test suite, the bench/gpu table, and tests/torch. Logs go to
# $OUT (or /tmp/hetccl-gpu) as well as stdout.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/hetccl-gpu}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
rc=0
echo "== tests/gpu"; timeout 420 "$root/tests/gpu/run.sh" 2>&1 | tail -150 | tee "$out/tests_gpu.log"; rc=$((rc | ${PIPESTATUS[0]}))
echo "== bench/gpu"; BUILD_DIR=$root/build-gpu timeout 300 "$root/bench/gpu/run.sh" 2>&1 | tee "$out/bench_gpu.log"; rc=$((rc | ${PIPESTATUS[0]}))
echo "== tests/torch"; OUT=$out timeout 600 "$root/tests/torch/run.sh" 2>&1 | tail -120 | tee "$out/tests_torch.log"; rc=$((rc | ${PIPESTATUS[0]}))
echo "all.sh: exit $rc"
exit $rc
