#!/usr/bin/env bash
# On the GPU machine, from the repo root: GPU programs (HETCCL_GPU_PROGRAM_BYTES)
# checked and measured in one go. Builds build-gpu, runs test_device_gpu's
# program groups, program_phases (where one program's time goes), gpu_bench
# A (ranks as threads) and B (both modes) with programs on (PROGRAM_BYTES,
# default 16K) and off (0), interleaved, and last the GPU ctest suite with
# programs on (correctness on the real driver; the longest part, so a run
# cut short still brings the figures; CTEST=0 skips it). Results under
# ${OUT:-.}. ON and OFF replace the two settings compared, for example
# ON=HETCCL_LL_BYTES=4K OFF=HETCCL_LL_BYTES=0 for the LL form.
#   bench/gpu/programs.sh [max_bytes]   (default 1 MiB)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
out=${OUT:-.}
max=${1:-1048576}
on=${ON:-HETCCL_GPU_PROGRAM_BYTES=${PROGRAM_BYTES:-16K}}
off=${OFF:-HETCCL_GPU_PROGRAM_BYTES=0}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
  cmake --build "$build" -j "$(nproc)" >"$out/build.log" 2>&1 || {
  echo "build FAILED"
  grep -E -A3 'error' "$out/build.log" | head -40
  exit 1
}
timeout 120 "$build/tests/test_device_gpu" >"$out/device.txt" 2>&1
grep -E "program|SUMMARY" "$out/device.txt"
timeout 120 "$build/bench/program_phases" 2>&1 | tee "$out/phases.txt"
GPU_BENCH_ONLY=A PROCESSES=0 "$root/bench/gpu/settings.sh" "$max" "$on" "$off" >"$out/a.txt" 2>&1
GPU_BENCH_ONLY=B "$root/bench/gpu/settings.sh" "$max" "$on" "$off" >"$out/b.txt" 2>&1
grep -E "^==|4-byte all-reduce|^ +[0-9]+ +[0-9.]+ +[0-9.]+$" "$out/a.txt" "$out/b.txt"
if [ "${CTEST:-1}" != 0 ]; then
  (cd "$build" && env "$on" timeout 300 ctest -L gpu -j3 >"$out/ctest.txt" 2>&1)
  grep -E "tests passed|Failed|\*\*\*" "$out/ctest.txt"
fi
