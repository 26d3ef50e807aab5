#!/usr/bin/env bash
# On the GPU machine, from the repo root: where a small GPU all-reduce's
# call time goes, by driver call. Runs gpu_bench up to max_bytes (default
# 4096, so that small calls dominate) under Nsight Systems with the CUDA API
# traced, ranks as threads, and prints the per-call summary (count, total
# and median time of each driver function) next to the calls made, so that
# calls per all-reduce and their cost read off one table.
#   bench/gpu/api_trace.sh [max_bytes]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
max=${1:-4096}
nsys=$(command -v nsys || ls -d /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -z "$nsys" ]; then
  echo "api_trace: no nsys on this machine"
  exit 77
fi
if [ ! -x "$build/bench/gpu_bench" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
    cmake --build "$build" -j "$(nproc)" --target gpu_bench >/dev/null || exit 1
fi
out=$(mktemp -d)
GPU_BENCH_PROCESSES=0 "$nsys" profile -t cuda --trace-fork-before-exec=true -o "$out/trace" --force-overwrite true \
  "$build/bench/gpu_bench" "$max" >"$out/bench.log" 2>&1 || { tail -20 "$out/bench.log"; exit 1; }
grep -E '^(A:|B:|4-byte|one at a time|back to back| +[0-9])' "$out/bench.log"
"$nsys" stats --report cuda_api_sum --format table "$out/trace.nsys-rep" 2>/dev/null | head -40
rm -rf "$out"
