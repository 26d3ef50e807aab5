#!/usr/bin/env bash
# bench/cpu/bcast_ways.sh: how a 2-rank broadcast of large messages goes
# each way on this machine, side by side with Open MPI's MPI_Bcast: the
# timed choice (default; its INFO lines name the way each size class
# took), slots only, pulls only, and pulls of bigger pieces. In-place time
# per call in us (MPI_Bcast is in place). Ranks bound one per core.
#   BUILD_DIR=build bench/cpu/bcast_ways.sh [min [max]]   default 2M 256M
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}
min=${1:-2M} max=${2:-256M}
cmake --build "$build" --target hetccl-perf hetccl-run >/dev/null || exit 1
mpib=$build/bench-cpu/mpi_bench
if [ ! -x "$mpib" ]; then mkdir -p "$build/bench-cpu" && mpicc -O2 -o "$mpib" "$root/bench/cpu/mpi_bench.c" || exit 1; fi
run() { # label env...
  local label=$1; shift
  printf '%-44s' "$label"
  env "$@" "$build/tools/hetccl-run" -n 2 --bind core "$build/tools/hetccl-perf" broadcast -b "$min" -e "$max" -f 4 \
    -n 5 -w 6 -c 0 2>"$build/bcast_ways.err" | awk '$1 == "[0]" && $2 ~ /^[0-9]+$/ { printf " %10s", $11 } END { print "" }'
}
printf '%-44s' "bytes"
"$build/tools/hetccl-run" -n 1 "$build/tools/hetccl-perf" broadcast -b "$min" -e "$max" -f 4 -n 1 -w 0 -c 0 2>/dev/null |
  awk '$1 == "[0]" && $2 ~ /^[0-9]+$/ { printf " %10s", $2 } END { print "" }'
run "hetccl, timed choice" HETCCL_DEBUG=INFO HETCCL_DEBUG_SUBSYS=API
grep -h "Broadcast of" "$build/bcast_ways.err" | sed 's/^.*rank /  rank /' | sort -u | head -20
run "hetccl, slots (CMA_TUNE=0)" HETCCL_SHM_CMA_TUNE=0
run "hetccl, pulls (CMA_TUNE=0 LONE_SEND_SLOTS=0)" HETCCL_SHM_CMA_TUNE=0 HETCCL_SHM_LONE_SEND_SLOTS=0
run "hetccl, pulls of 4M pieces" HETCCL_SHM_CMA_TUNE=0 HETCCL_SHM_LONE_SEND_SLOTS=0 HETCCL_SHM_PASS_BYTES=4M HETCCL_CHUNK_BYTES=4M
printf '%-44s' "Open MPI MPI_Bcast"
mpirun --allow-run-as-root --use-hwthread-cpus --map-by hwthread --bind-to hwthread -n 2 "$mpib" broadcast \
  -G "$min-${max}x5" -f 4 -w 6 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && NF >= 8 { printf " %10s", $6 } END { print "" }'
