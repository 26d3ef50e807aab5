#!/usr/bin/env bash
# The kernel image cache end to end (device/kernel_cache.c), over the fake
# libcuda.so.1 and the real NVRTC, each step a whole test_device_gpu run
# that must pass:
#   1. an empty cache: NVRTC compiles, and the image is kept;
#   2. a second process: the image comes from the cache, nothing compiles;
#   3. a driver that refuses cubins (FAKE_CUDA_REJECT_CUBIN=1) is handed the
#      cached cubin: it is compiled afresh, and the kernels come from PTX.
# Exits 77 (skip) where NVRTC is not installed.
# Usage: kernel_cache.sh TEST_DEVICE_GPU FAKE_CUDA_DIR
set -u
bin=$1 fake=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log=$work/log
fail() { echo "FAIL step $1: $2 (log below)"; cat "$log"; exit 1; }
run() { # step, extra environment...
  local step=$1
  shift
  env LD_LIBRARY_PATH="$fake" FAKE_CUDA_DEVICES=1 FAKE_CUDA_DELAY_US=0 GPU_TEST_QUICK=1 HETCCL_DEBUG=INFO \
    HETCCL_DEBUG_SUBSYS=DEV HETCCL_KERNEL_CACHE_DIR="$work/cache" "$@" "$bin" >"$log" 2>&1 ||
    fail "$step" "test_device_gpu failed"
}
has() { grep -q -- "$1" "$log"; }

run 1
if ! has "compiled the reduction kernels"; then
  has "NVRTC not available" && { echo "SKIP: no NVRTC here"; exit 77; }
  fail 1 "no compile line"
fi
has "from the kernel cache" && fail 1 "an empty cache hit"
ls "$work"/cache/kernels-*.bin >/dev/null 2>&1 || fail 1 "no image kept in $work/cache"
echo "PASS 1: compiled, and kept: $(cd "$work/cache" && ls)"

run 2
has "from the kernel cache" || fail 2 "the kept image was not used"
has "compiled the reduction kernels" && fail 2 "compiled although the image was kept"
echo "PASS 2: $(grep -o 'reduction kernels (.*' "$log" | head -1)"

run 3 FAKE_CUDA_REJECT_CUBIN=1
has "loading the cached .* image failed.*compiling it" || fail 3 "the refused cached image was not compiled afresh"
has "compiled the reduction kernels (.* ptx" || fail 3 "no PTX compile after the refused cubin"
has "reductions ran on: kernels" || fail 3 "the reductions did not run on kernels"
echo "PASS 3: a refused cached cubin compiled afresh, then PTX"
