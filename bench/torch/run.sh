#!/usr/bin/env bash
# On the GPU machine, from the repo root: all-reduce busbw between two ranks
# on cuda:0 in two HETCCL_GROUPs, through torch.distributed on hetccl
# (LD_PRELOAD), next to hetccl's own gpu_bench in the same layout (one
# process per rank), with the ratio torch / hetccl per size, and torch's
# gloo backend on the same CUDA tensors in the same layout (no hetccl), with
# the ratio torch+hetccl / gloo: what a job across vendors uses today.
#   bench/torch/run.sh [max_bytes]        (default 256 MiB)
# MPS=1 runs all of it under CUDA MPS: the two processes then share one
# context, as two processes with a GPU each would not time-slice one.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
out=${OUT:-/tmp/hetccl-bench-torch}
mkdir -p "$out"
max=${1:-268435456}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)" >/dev/null
if [ "${MPS:-0}" = 1 ]; then
  command -v nvidia-cuda-mps-control >/dev/null || { echo "MPS=1: nvidia-cuda-mps-control is not installed"; exit 1; }
  mps=$(mktemp -d)
  export CUDA_MPS_PIPE_DIRECTORY=$mps/pipe CUDA_MPS_LOG_DIRECTORY=$mps/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d
  trap 'echo quit | nvidia-cuda-mps-control; rm -rf "$mps"' EXIT
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
MAX_BYTES=$max LD_PRELOAD=$build/nccl/libhetccl.so "$build/tools/hetccl-run" -n 2 --timeout 600 \
  --rank-env 0:HETCCL_GROUP=a --rank-env 1:HETCCL_GROUP=b python3 "$root/bench/torch/busbw.py" \
  | sed 's/^\[0\] //' | grep -E '^ +[0-9]' >"$out/torch.txt"
BACKEND=gloo GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME:-lo} MAX_BYTES=$max "$build/tools/hetccl-run" -n 2 --timeout 600 \
  python3 "$root/bench/torch/busbw.py" | sed 's/^\[0\] //' | grep -E '^ +[0-9]' >"$out/gloo.txt"
GPU_BENCH_PROCESSES=1 "$build/bench/gpu_bench" "$max" >"$out/gpu_bench.txt"
python3 - "$out/torch.txt" "$out/gpu_bench.txt" "$out/gloo.txt" <<'PY'
import os
import sys
def rows(lines):
    """bytes -> (time us, busbw GB/s) of rows 'bytes time busbw ...'."""
    return {int(f[0]): (float(f[1]), float(f[2])) for f in (l.split() for l in lines) if f and f[0].isdigit()}
torch, gloo = rows(open(sys.argv[1])), rows(open(sys.argv[3]))
# gpu_bench: the back-to-back table of A, which comes before B.
own, table = [], False
for line in open(sys.argv[2]):
    if line.startswith("B:"):
        break
    table = table or line.startswith("back to back")
    if table:
        own.append(line)
own = rows(own)
mps = " (under MPS)" if os.environ.get("MPS") == "1" else ""
print(f"all-reduce float32 sum, 2 ranks on cuda:0 in two groups, one process each{mps}")
print("busbw in GB/s; ratios of times: gpu_bench's / torch+hetccl's, gloo's / torch+hetccl's")
print(f"{'bytes':>12} {'torch+hetccl':>13} {'gpu_bench':>10} {'ratio':>7} {'torch+gloo':>11} {'hetccl/gloo':>12}")
for size, (t, bw) in sorted(torch.items()):
    ot, obw = own.get(size, (0.0, 0.0))
    gt, gbw = gloo.get(size, (0.0, 0.0))
    ratio = lambda other: f"{other / t:.2f}" if other and t else "-"
    print(f"{size:12d} {bw:13.2f} {obw:10.2f} {ratio(ot):>7} {gbw:11.2f} {ratio(gt):>12}")
PY
