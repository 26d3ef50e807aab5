#!/usr/bin/env bash
# On the GPU machine, from the repo root: the three gpu_bench views that
# issue 19's GPU targets name, each in its own process under its own
# timeout, so that one that hangs or runs long leaves the others' figures:
#   A, ranks as threads    (4-byte cross-group all-reduce latency)
#   A, ranks as processes  (busbw from 16 MiB against the staging bound)
#   B, a GPU rank + a CPU rank (busbw against the pinned copy rate)
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
exit $rc
