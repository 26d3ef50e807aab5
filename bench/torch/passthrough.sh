#!/usr/bin/env bash
# On the GPU machine, from the repo root: what hetccl's pass-through costs
# against the real NCCL. The same torch.distributed all-reduce loop
# (bench/torch/busbw.py) runs natively and under LD_PRELOAD=libhetccl.so,
# passes alternating, and prints per size the median time of each and
# native / hetccl (1.00 = no cost; above 1 = hetccl faster).
#   bench/torch/passthrough.sh [max_bytes] [passes]   (256 MiB, 3)
# With one GPU this is world size 1: a one-vendor comm whose every call
# hetccl hands to NCCL, so the difference is hetccl's own path per call
# (argument checks, the comm lookup, the vendor dispatch). NCCL refuses two
# ranks on one GPU, so a 2-rank pass-through needs a machine with 2 GPUs:
# NRANKS=2 runs one rank per GPU there.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
out=${OUT:-/tmp/hetccl-bench-passthrough}
max=${1:-268435456}
passes=${2:-3}
nranks=${NRANKS:-1}
mkdir -p "$out"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)" >/dev/null
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
run_once() { # $1: output file; the rest: the environment prefix
  local file=$1
  shift
  env "$@" MAX_BYTES="$max" "$build/tools/hetccl-run" -n "$nranks" --timeout 600 \
    python3 "$root/bench/torch/busbw.py" | sed 's/^\[0\] //' | grep -E '^ +[0-9]' >"$file"
}
for p in $(seq "$passes"); do
  run_once "$out/native.$p"
  run_once "$out/hetccl.$p" LD_PRELOAD="$build/nccl/libhetccl.so"
done
python3 - "$out" "$passes" "$nranks" <<'PY'
import statistics, sys
out, passes, nranks = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def times(kind):
    per = {}
    for p in range(1, passes + 1):
        for line in open(f"{out}/{kind}.{p}"):
            f = line.split()
            per.setdefault(int(f[0]), []).append(float(f[1]))
    return {k: statistics.median(v) for k, v in per.items()}
native, het = times("native"), times("hetccl")
print(f"all-reduce float32 sum through torch.distributed, {nranks} rank(s), "
      f"medians of {passes} alternating passes (us per call)")
print(f"{'bytes':>12} {'native NCCL':>12} {'hetccl':>10} {'native/hetccl':>14}")
for size in sorted(native):
    if size in het:
        print(f"{size:12d} {native[size]:12.1f} {het[size]:10.1f} {native[size] / het[size]:14.2f}")
PY
