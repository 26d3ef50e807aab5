#!/usr/bin/env bash
# On the GPU machine, from the repo root: all-reduce busbw between two ranks
# on cuda:0 in two HETCCL_GROUPs, through torch.distributed on hetccl
# (LD_PRELOAD), next to hetccl's own gpu_bench in the same layout (one
# process per rank), with the ratio torch / hetccl per size.
#   bench/torch/run.sh [max_bytes]        (default 256 MiB)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
out=${OUT:-/tmp/hetccl-bench-torch}
mkdir -p "$out"
max=${1:-268435456}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)" >/dev/null
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
MAX_BYTES=$max LD_PRELOAD=$build/nccl/libhetccl.so "$build/tools/hetccl-run" -n 2 --timeout 600 \
  --rank-env 0:HETCCL_GROUP=a --rank-env 1:HETCCL_GROUP=b python3 "$root/bench/torch/busbw.py" \
  | sed 's/^\[0\] //' | grep -E '^ +[0-9]' >"$out/torch.txt"
GPU_BENCH_PROCESSES=1 "$build/bench/gpu_bench" "$max" >"$out/gpu_bench.txt"
python3 - "$out/torch.txt" "$out/gpu_bench.txt" <<'PY'
import sys
torch = {int(l.split()[0]): float(l.split()[2]) for l in open(sys.argv[1]) if l.strip()}
own, table = {}, False
for line in open(sys.argv[2]):
    if line.startswith("A:"):
        table = True
    elif line.startswith("B:"):
        table = False
    elif table and line.split() and line.split()[0].isdigit():
        own[int(line.split()[0])] = float(line.split()[2])
print("all-reduce float32 sum, 2 ranks on cuda:0 in two groups, one process each (GB/s busbw)")
print(f"{'bytes':>12} {'torch+hetccl':>13} {'gpu_bench':>10} {'ratio':>7}")
for size in sorted(torch):
    if size in own:
        ratio = torch[size] / own[size] if own[size] else 0
        print(f"{size:12d} {torch[size]:13.2f} {own[size]:10.2f} {ratio:7.2f}")
PY
