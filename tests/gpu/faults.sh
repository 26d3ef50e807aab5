#!/usr/bin/env bash
# On the GPU machine: tests/gpu/test_gpu_faults in every mode that one GPU
# can run, on the real driver, with the settings CI gives the fake driver
# (tests/gpu/coll.cmake), plus kill with HETCCL_RELEASE_TRAP=0. Where NVRTC
# builds the kernels, a call in flight that nobody aborts must end in the
# trap check (kill, stop, recv_kill), and one aborted within the grace must
# drain on a device that still works (kill_abort). The vendor init modes
# need two GPUs and the fake NCCL: CI runs them.
#   tests/gpu/faults.sh [BUILD_DIR]      default build-gpu
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-gpu}
if [ ! -x "$build/tests/test_gpu_faults" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
    cmake --build "$build" -j "$(nproc)" --target test_gpu_faults >/dev/null || exit 1
fi
# mode, then the environment of its run
runs=(
  "kill HETCCL_TIMEOUT=120"
  "kill_abort HETCCL_TIMEOUT=120"
  "kill HETCCL_TIMEOUT=120 HETCCL_RELEASE_TRAP=0"
  "stop HETCCL_TIMEOUT=5"
  "abort HETCCL_TIMEOUT=120"
  "cpu_kill HETCCL_TIMEOUT=120"
  "dump HETCCL_TIMEOUT=120 HETCCL_SHM_DISABLE=1 HETCCL_DUMP_SIGNAL=USR1"
  "recv_kill HETCCL_TIMEOUT=120 HETCCL_SHM_DISABLE=1"
)
failed=0
for r in "${runs[@]}"; do
  read -r mode env <<<"$r"
  echo "== $mode ($env)"
  # shellcheck disable=SC2086 # env is a list of settings
  out=$(env $env HETCCL_VENDOR=0 timeout 200 "$build/tests/test_gpu_faults" "$mode" 2>&1)
  rc=$?
  grep -E '^rank|survivor|checks|FAIL' <<<"$out" | cut -c1-300
  if [ $rc != 0 ]; then
    failed=$((failed + 1))
    echo "-- $mode: exit $rc; its last lines:"
    tail -15 <<<"$out"
  fi
done
echo "faults.sh: ${#runs[@]} runs, $failed failed"
[ $failed = 0 ]
