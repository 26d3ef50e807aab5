#!/usr/bin/env bash
# 100 000 small all-reduces and 1 000 init/destroy cycles on N local ranks
# (default 4), with RSS, open fds and /dev/shm entries at start and end.
#   bench/endurance.sh [N] [ALLREDUCES] [CYCLES]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cmake -S "$root" -B "$root/build" >/dev/null && cmake --build "$root/build" -j "$(nproc)" --target hetccl-run endurance >/dev/null
"$root/build/tools/hetccl-run" -n "${1:-4}" "$root/build/bench/endurance" "${2:-100000}" "${3:-1000}"
