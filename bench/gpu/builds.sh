#!/usr/bin/env bash
# On the GPU machine, from the repo root: this tree against a baseline tree
# on the same machine in one run, for a change that no setting can turn off
# (a kernel's code, the host path of a call). Builds both, then runs
# program_phases and gpu_bench A (ranks as threads) and B (threads and
# processes) of each tree in turn, PASSES times (default 2), so that both
# meet the same host and GPU. The baseline is a tarball of a commit, made
# where the repository is:
#   mkdir -p build-base && git archive -o build-base/base.tar <commit>   (ignored: carry it)
#   bench/gpu/builds.sh build-base/base.tar [max_bytes]   (default 64 KiB)
# Results under ${OUT:-.}; the summary lines are printed.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
base_tar=${1:?baseline tarball}
max=${2:-65536}
out=${OUT:-.}
base_src=$(mktemp -d)
tar -xf "$base_tar" -C "$base_src" || exit 1
declare -A build=([base]="$base_src/build" [new]="$root/build-gpu")
declare -A src=([base]="$base_src" [new]="$root")
for which in base new; do
  cmake -S "${src[$which]}" -B "${build[$which]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
    cmake --build "${build[$which]}" -j "$(nproc)" --target gpu_bench program_phases >"$out/build-$which.log" 2>&1 || {
    echo "build of $which FAILED"
    grep -E -A3 'error' "$out/build-$which.log" | head -40
    exit 1
  }
done
for pass in $(seq "${PASSES:-2}"); do
  for which in base new; do
    b=${build[$which]}
    f="$out/$which-$pass.txt"
    {
      echo "== $which, pass $pass: program_phases"
      timeout 120 "$b/bench/program_phases"
      echo "== $which, pass $pass: A, threads"
      GPU_BENCH_ONLY=A GPU_BENCH_PROCESSES=0 timeout 180 "$b/bench/gpu_bench" "$max"
      for processes in 0 1; do
        echo "== $which, pass $pass: B, processes=$processes"
        GPU_BENCH_ONLY=B GPU_BENCH_PROCESSES=$processes timeout 180 "$b/bench/gpu_bench" "$max"
      done
    } >"$f" 2>&1
    grep -E "^==|4-byte all-reduce|program|exchange|^ +[0-9]+ +[0-9.]+ +[0-9.]+( +[0-9]+%)?$" "$f"
  done
done
