#!/usr/bin/env bash
# On the GPU machine, from the repo root: gpu_bench (A: two GPU ranks in two
# groups; B: a GPU rank and a CPU rank) once per setting, ranks as threads
# and as processes, so that settings compare within one run of the machine.
# A setting is "-" (the defaults) or environment assignments separated by
# spaces, for example "HETCCL_ALGO=allreduce:onestep".
#   bench/gpu/settings.sh max_bytes setting...
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
max=${1:?max_bytes}
shift
[ $# -gt 0 ] || set -- -
if [ ! -x "$build/bench/gpu_bench" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
    cmake --build "$build" -j "$(nproc)" --target gpu_bench >/dev/null || exit 1
fi
for setting in "$@"; do
  vars=()
  [ "$setting" = - ] || read -r -a vars <<<"$setting"
  for processes in ${PROCESSES:-0 1}; do
    echo "== ${setting} GPU_BENCH_PROCESSES=$processes"
    env "${vars[@]}" GPU_BENCH_PROCESSES="$processes" timeout 180 "$build/bench/gpu_bench" "$max"
  done
done
