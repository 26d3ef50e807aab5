#!/usr/bin/env bash
# NVIDIA's nccl-tests, unmodified, on hetccl (LD_PRELOAD), on the GPU
# machine, from the repo root:
#   tests/gpu/nccl_tests.sh NCCL_TESTS_SOURCE_DIR
# The machine reaches no registry, so the source comes with the tree: on
# the workstation, `git -C <nccl-tests clone> archive HEAD | tar -x -C
# build-nccl-tests/src` and pass build-nccl-tests to the device tool's carry.
# Builds hetccl (build-gpu) and nccl-tests (MPI=1) against the nccl.h of
# torch's NCCL wheel (docs/nccl-abi.md), then runs every collective with
# -c 1 (each result checked against nccl-tests' own reference), in and out
# of place, one process per rank on device 0 under mpirun:
#   2 ranks in groups a,b and 3 ranks in a,b,b (hetccl's cross-group plans);
#   all_reduce once more over every datatype and op at small sizes.
# Fails when a run fails or reports a wrong value ("Out of bounds values").
# Optional: MAX_BYTES (default 64M), BUILD_DIR (default build-gpu).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
src=$(cd "${1:?nccl-tests source directory}" && pwd) || exit 1
build=${BUILD_DIR:-$root/build-gpu}
case $build in /*) ;; *) build=$root/$build ;; esac
max=${MAX_BYTES:-64M}
work=$build/nccl-tests
mkdir -p "$work"

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
  cmake --build "$build" -j "$(nproc)" --target hetccl_nccl >/dev/null || { echo "hetccl build FAILED"; exit 1; }
hetccl=$build/nccl/libhetccl.so
# A preload that names no file is ignored with a warning, and the real
# NCCL then answers every call: a fresh build tree once ran the real
# library here, two ranks on one GPU, and failed in its init.
[ -f "$hetccl" ] || { echo "no $hetccl to preload"; exit 1; }

# nccl-tests links -lnccl; the wheel ships only libnccl.so.2.
wheel=$(python3 -c 'import nvidia.nccl as m; print(m.__path__[0])' 2>/dev/null) ||
  { echo "no NCCL wheel (nvidia.nccl) to build against"; exit 1; }
mkdir -p "$work/nccl/lib"
ln -sfn "$wheel/include" "$work/nccl/include"
ln -sf "$wheel/lib/libnccl.so.2" "$work/nccl/lib/libnccl.so"
# nccl-tests looks for MPI_HOME/include/mpi.h; Debian keeps it under
# /usr/lib/<triplet>/openmpi, which only the wrapper compiler knows.
mpi_inc=$(mpicc --showme:incdirs 2>/dev/null | tr ' ' '\n' | while read -r d; do [ -f "$d/mpi.h" ] && echo "$d" && break; done)
[ -n "$mpi_inc" ] || { echo "mpicc names no folder with mpi.h"; exit 1; }
mpi_home=$(dirname "$mpi_inc")
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
if ! make -C "$src/src" -j "$(nproc)" MPI=1 MPI_HOME="$mpi_home" CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" \
  NCCL_HOME="$work/nccl" BUILDDIR="$work/bin" NVCC_GENCODE="-gencode=arch=compute_${cap:-90},code=sm_${cap:-90}" \
  >"$work/build.log" 2>&1; then
  echo "nccl-tests build FAILED (log: $work/build.log)"
  tail -30 "$work/build.log"
  exit 1
fi

export NCCL_TESTS_DEVICE=0 LD_LIBRARY_PATH=$work/nccl/lib:${LD_LIBRARY_PATH:-}
fail=0
run() { # label groups binary args...
  local label=$1 groups=$2 bin=$3
  shift 3
  local spec=() g
  for g in ${groups//,/ }; do
    [ ${#spec[@]} -eq 0 ] || spec+=(:)
    spec+=(-n 1 -x LD_PRELOAD="$hetccl" -x HETCCL_GROUP="$g" -x NCCL_TESTS_DEVICE -x LD_LIBRARY_PATH "$work/bin/$bin" "$@")
  done
  echo "== $label: groups $groups, $bin $*"
  timeout 300 mpirun --allow-run-as-root --oversubscribe "${spec[@]}" >"$work/out.txt" 2>&1
  local rc=$?
  grep -E '^ +[0-9]+ |Out of bounds|Avg bus|nccl-library|[Ee]rror|FAIL' "$work/out.txt" | head -60
  if grep -q 'cannot be preloaded' "$work/out.txt"; then
    echo "FAILED: $label: the loader did not preload $hetccl"
    fail=1
  elif [ $rc -ne 0 ] || ! grep -q 'Out of bounds values : 0 OK' "$work/out.txt"; then
    echo "FAILED: $label (exit $rc)"
    tail -20 "$work/out.txt"
    fail=1
  fi
}

for groups in a,b a,b,b; do
  for coll in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter; do
    run "$coll" "$groups" "${coll}_perf" -b 8 -e "$max" -f 8 -c 1 -n 5 -w 2
  done
done
run "all_reduce, every datatype and op" a,b,b all_reduce_perf -b 8 -e 64K -f 64 -d all -o all -c 1 -n 2 -w 1

echo
[ $fail -eq 0 ] && echo "nccl-tests: PASS (every run 0 wrong values)" || echo "nccl-tests: FAILED"
exit $fail
