#!/usr/bin/env bash
# On the GPU machine, from the repo root: builds hetccl and prints the
# staging bound, the cross-group all-reduce table and its efficiency.
#   bench/gpu/run.sh [max_bytes]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)" --target gpu_bench >/dev/null
nvidia-smi -L || true
"$build/bench/gpu_bench" "$@"
