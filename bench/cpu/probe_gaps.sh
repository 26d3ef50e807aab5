#!/usr/bin/env bash
# bench/cpu/probe_gaps.sh: the cells of the 16-core sweep that stay below
# Open MPI (docs/perf.md, "16 cores, 5 Dec 2026 (night)"), each probed
# with the knobs it may depend on. Run on the GPU machine from the repo
# root after a build (BUILD_DIR, default build-gpu; BASE_BUILD_DIR: another
# build that part 1b alternates with):
#  1. the broadcast of 2 and 4 ranks at 8 B - 2K against Open MPI; then
#     the 2-rank one in place against out of place, three runs of
#     ITERS_LIST calls per size (default 1000 20000; in place was slower
#     from 128 B in the sweep);
#  2. the 16-rank all-reduce at 128K - 2M: the timed pull-or-copy choice
#     against pulls only and copies only (HETCCL_SHM_CMA_TUNE=0, HETCCL_SHM_CMA=0),
#     the ring against the direct algorithm, pulls from 16 KiB (the direct
#     algorithm's pieces are 32 KiB there), KNOB_PASSES passes (default 2),
#     and the choice each rank made.
set -uo pipefail
b=${BUILD_DIR:-build-gpu}
run=$b/tools/hetccl-run perf=$b/tools/hetccl-perf
echo "== 1. broadcast, 2 and 4 ranks, against Open MPI"
BUILD_DIR=$b NS="2 4" COLLS=broadcast LIBS="hetccl ompi-shm" SIZES_MIN=8 SIZES_MAX=2K PASSES=3 \
  bench/cpu/compare.sh --no-install 2>&1 | sed -n '/^## broadcast/,/^$/p'
echo "== 1b. broadcast, 2 ranks: us per call, out of place / in place${BASE_BUILD_DIR:+ (and the build in $BASE_BUILD_DIR, alternating)}"
for pass in 1 2 3; do
  for iters in ${ITERS_LIST:-1000 20000}; do
    for d in $b ${BASE_BUILD_DIR:-}; do
      echo "-- pass $pass, $iters calls per size, warm-up 6, $d"
      $d/tools/hetccl-run -n 2 --bind core $d/tools/hetccl-perf broadcast -b 8 -e 2K -f 4 -n $iters -w 6 -c 0 2>/dev/null |
        awk '$2 ~ /^[0-9]+$/ { printf "%8s B  %6s / %6s\n", $2, $7, $11 }'
    done
  done
done
echo "== 2. all_reduce, 16 ranks, 128K - 2M"
for pass in $(seq ${KNOB_PASSES:-2}); do
  BUILD_DIR=$b NS=16 COLLS=all_reduce SIZES_MIN=128K SIZES_MAX=2M ITERS=200 WARMUP=20 bench/cpu/knobs.sh \
    - HETCCL_SHM_CMA_TUNE=0 HETCCL_SHM_CMA=0 HETCCL_ALGO=allreduce:ring HETCCL_SHM_CMA_MIN_BYTES=16K
done
echo "-- the choices of rank 0 and rank 15 (HETCCL_DEBUG=INFO)"
HETCCL_DEBUG=INFO HETCCL_DEBUG_SUBSYS=API $run -n 16 --bind core $perf all_reduce -b 128K -e 2M -f 4 -n 200 -w 20 -c 0 2>&1 |
  grep -E "^\[ *(0|15)\].*(slot copies|pulls), best" | sed 's/comm 0x[0-9a-f]* //' | head -20
