#!/usr/bin/env bash
# On the GPU machine, from the repo root: gpu_bench built once per set of
# compile-time definitions (the tuning constants that are no HETCCL_*
# variable), each build run in turn, ranks as threads and as processes,
# ROUNDS times, so that the builds compare within one run of the machine.
# Prints the copy rates and the back-to-back rows from 1 MiB.
#   bench/gpu/variants.sh max_bytes name=CFLAGS...
#   e.g. GPU_BENCH_ONLY=B bench/gpu/variants.sh 268435456 base= spin200=-DHC_HOST_POOL_SPIN_NS=200000ull
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
max=${1:?max_bytes}
shift
names=()
for v in "$@"; do
  name=${v%%=*}
  names+=("$name")
  (cmake -S "$root" -B "$root/build-variant-$name" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="${v#*=}" >/dev/null &&
    cmake --build "$root/build-variant-$name" -j "$(nproc)" --target gpu_bench >/dev/null) &
done
wait
for round in $(seq "${ROUNDS:-1}"); do
  for name in "${names[@]}"; do
    for processes in ${PROCESSES:-0 1}; do
      echo "== round $round, $name, GPU_BENCH_PROCESSES=$processes"
      GPU_BENCH_PROCESSES=$processes timeout 180 "$root/build-variant-$name/bench/gpu_bench" "$max" |
        awk '/pinned|host copies|^[AB]:/ || ($1 >= 1048576 && NF == 4)'
    done
  done
done
