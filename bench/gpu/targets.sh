#!/usr/bin/env bash
# On the GPU machine, from the repo root: the three gpu_bench views that
# issue 19's GPU targets name, each in its own process under its own
# timeout, so that one that hangs or runs long leaves the others' figures:
#   A, ranks as threads    (4-byte cross-group all-reduce latency)
#   A, ranks as processes  (busbw from 16 MiB against the staging bound)
#   B, a GPU rank + a CPU rank (busbw against the pinned copy rate)
# and then A as processes once more under CUDA MPS, where
# nvidia-cuda-mps-control exists (mps.sh): the processes no longer take
# turns on the one GPU, the closest this machine has to the cluster's
# layout of a GPU per process.
#   bench/gpu/targets.sh [max_bytes]   (default 64 MiB)
# Builds gpu_bench in ${BUILD_DIR:-build-gpu}; logs under ${OUT:-.}.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
case $build in /*) ;; *) build=$root/$build ;; esac
max=${1:-67108864}
out=${OUT:-.}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
  cmake --build "$build" -j "$(nproc)" --target gpu_bench >"$out/build-gpu_bench.log" 2>&1 || {
  echo "build of gpu_bench FAILED (log: $out/build-gpu_bench.log)"
  exit 1
}
rc=0
for view in A:0 A:1 B:0; do
  only=${view%:*} processes=${view#*:}
  echo "== gpu_bench $only, processes=$processes, up to $max bytes"
  GPU_BENCH_ONLY=$only GPU_BENCH_PROCESSES=$processes timeout "${VIEW_TIMEOUT:-120}" "$build/bench/gpu_bench" "$max" 2>&1 |
    tee "$out/gpu_bench-$only-$processes.txt"
  r=${PIPESTATUS[0]}
  [ "$r" = 0 ] || { echo "== gpu_bench $only, processes=$processes: exit $r"; rc=1; }
done
processes_under_mps() {
  echo "== gpu_bench A, processes=1, under MPS, up to $max bytes"
  GPU_BENCH_ONLY=A GPU_BENCH_PROCESSES=1 timeout "${VIEW_TIMEOUT:-120}" "$build/bench/gpu_bench" "$max" 2>&1 |
    tee "$out/gpu_bench-A-1-mps.txt"
  return "${PIPESTATUS[0]}"
}
. "$root/bench/gpu/mps.sh"
under_mps processes_under_mps
r=$?
[ "$r" = 0 ] || [ "$r" = 125 ] || { echo "== gpu_bench A, processes=1, under MPS: exit $r"; rc=1; }
exit $rc
