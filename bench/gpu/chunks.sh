#!/usr/bin/env bash
# On the GPU machine, from the repo root: gpu_bench's cross-group
# all-reduce (A) at several window slot sizes (HETCCL_GPU_CHUNK_BYTES),
# ranks as threads and as processes; then the processes once more under
# CUDA MPS where nvidia-cuda-mps-control exists. Two processes on one GPU
# are two contexts, which the GPU time-slices; under MPS they share one,
# so the difference between the two process runs is what the time-slicing
# costs, and what one process per GPU would not pay. The MPS daemon is
# started in a private directory and stopped at the end.
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
if command -v nvidia-cuda-mps-control >/dev/null; then
  mps=$(mktemp -d)
  export CUDA_MPS_PIPE_DIRECTORY=$mps/pipe CUDA_MPS_LOG_DIRECTORY=$mps/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    for chunk in "${chunks[@]}"; do
      echo "== under MPS: HETCCL_GPU_CHUNK_BYTES=$chunk GPU_BENCH_PROCESSES=1"
      HETCCL_GPU_CHUNK_BYTES=$chunk GPU_BENCH_PROCESSES=1 timeout 120 "$build/bench/gpu_bench" "$max" | a_only
    done
    echo quit | nvidia-cuda-mps-control
  else
    echo "MPS: the daemon did not start"
  fi
  rm -rf "$mps"
else
  echo "MPS: nvidia-cuda-mps-control is not installed"
fi
