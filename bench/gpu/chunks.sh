#!/usr/bin/env bash
# On the GPU machine, from the repo root: gpu_bench's cross-group
# all-reduce (A) at several window slot sizes (HETCCL_GPU_CHUNK_BYTES),
# ranks as threads and as processes; then the processes once more under
# CUDA MPS where nvidia-cuda-mps-control exists (mps.sh): the difference
# between the two process runs is what the time-slicing costs, and what
# one process per GPU would not pay.
#   bench/gpu/chunks.sh [max_bytes] [chunk ...]   default 268435456, 1M 2M 4M
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
max=${1:-268435456}
shift || true
chunks=("$@")
[ ${#chunks[@]} -gt 0 ] || chunks=(1048576 2097152 4194304)
if [ ! -x "$build/bench/gpu_bench" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
    cmake --build "$build" -j "$(nproc)" --target gpu_bench >/dev/null || exit 1
fi
# A's tables only: B (a GPU rank and a CPU rank) does not depend on them.
a_only() { awk '/^B:/ { exit } { print }'; }
for chunk in "${chunks[@]}"; do
  for processes in 0 1; do
    echo "== HETCCL_GPU_CHUNK_BYTES=$chunk GPU_BENCH_PROCESSES=$processes"
    HETCCL_GPU_CHUNK_BYTES=$chunk GPU_BENCH_PROCESSES=$processes timeout 120 "$build/bench/gpu_bench" "$max" | a_only
  done
done
processes_at_each_chunk() {
  for chunk in "${chunks[@]}"; do
    echo "== under MPS: HETCCL_GPU_CHUNK_BYTES=$chunk GPU_BENCH_PROCESSES=1"
    HETCCL_GPU_CHUNK_BYTES=$chunk GPU_BENCH_PROCESSES=1 timeout 120 "$build/bench/gpu_bench" "$max" | a_only
  done
}
. "$root/bench/gpu/mps.sh"
under_mps processes_at_each_chunk
