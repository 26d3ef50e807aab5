#!/usr/bin/env bash
# PyTorch on hetccl, one command on the GPU machine, from the repo root:
#   tests/torch/run.sh
# Builds hetccl, then runs the same scripts with and without LD_PRELOAD:
#  1. every nccl* symbol that the installed torch imports is exported;
#  2. ops.py with 2 ranks on cuda:0 in different HETCCL_GROUPs (hetccl's own
#     cross-group path; NCCL alone refuses two ranks on one GPU), with 4
#     ranks in two interleaved groups (the hierarchical plans), and with
#     world size 1;
#  3. ddp.py: 2 ranks in different groups, and 4 ranks in two groups, under
#     hetccl against the single-process reference without hetccl;
#     final-loss relative error.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/hetccl-torch}
mkdir -p "$out"
build=${BUILD_DIR:-$root/build-torch}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null && cmake --build "$build" -j "$(nproc)" >/dev/null || exit 1
lib=$build/nccl/libhetccl.so
run=$build/tools/hetccl-run
py=${PYTHON:-python3}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
fail=0

# The loss curve of a hetccl run next to the reference's (every k-th step),
# and the relative error of the final loss, which must be at most 1e-3.
compare_losses() { # reference hetccl label k
  $py - "$@" <<'PY'
import sys
ref = [float(x) for x in open(sys.argv[1])]
het = [float(x) for x in open(sys.argv[2])]
rel = abs(het[-1] - ref[-1]) / abs(ref[-1])
print(f"step  reference   hetccl({sys.argv[3]})")
for i in list(range(0, len(ref), int(sys.argv[4]))) + [len(ref) - 1]:
    print(f"{i:4d}  {ref[i]:.6f}  {het[i]:.6f}")
print(f"final loss relative error {rel:.2e} (bound 1e-3)")
sys.exit(0 if rel <= 1e-3 else 1)
PY
}

echo "== 1. symbols torch imports"
torch_cuda=$($py -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so"))')
missing=0
for s in $(nm -D --undefined-only "$torch_cuda" | awk '{print $2}' | grep -E '^nccl' | sed 's/@.*//' | sort -u); do
  nm -D --defined-only "$lib" | awk '{print $3}' | grep -qx "$s" || { echo "missing: $s"; missing=1; }
done
[ $missing = 0 ] && echo "every nccl* symbol libtorch_cuda.so imports is exported" || fail=1

echo "== 2. torch.distributed ops, 2 ranks on cuda:0 in two groups, under hetccl"
LD_PRELOAD=$lib $run -n 2 --timeout 300 --rank-env 0:HETCCL_GROUP=a --rank-env 1:HETCCL_GROUP=b \
  $py "$root/tests/torch/ops.py" || fail=1
echo "== 2a. 4 ranks on cuda:0 in two interleaved groups (a b a b): the hierarchical plans"
LD_PRELOAD=$lib $run -n 4 --timeout 300 --rank-env 0:HETCCL_GROUP=a --rank-env 1:HETCCL_GROUP=b \
  --rank-env 2:HETCCL_GROUP=a --rank-env 3:HETCCL_GROUP=b $py "$root/tests/torch/ops.py" || fail=1
echo "== 2b. world size 1, under hetccl"
LD_PRELOAD=$lib $run -n 1 --timeout 300 $py "$root/tests/torch/ops.py" || fail=1
echo "== 2c. world size 1, native NCCL (same script)"
$run -n 1 --timeout 300 $py "$root/tests/torch/ops.py" || fail=1

echo "== 3. DDP: reference (1 process, native NCCL) vs 2 ranks in two groups under hetccl"
LOSS_FILE=$out/loss_ref.txt $run -n 1 --timeout 600 $py "$root/tests/torch/ddp.py" || fail=1
LOSS_FILE=$out/loss_hetccl.txt LD_PRELOAD=$lib $run -n 2 --timeout 600 \
  --rank-env 0:HETCCL_GROUP=a --rank-env 1:HETCCL_GROUP=b $py "$root/tests/torch/ddp.py" || fail=1
compare_losses "$out/loss_ref.txt" "$out/loss_hetccl.txt" "2 groups" 20 || fail=1

echo "== 3b. DDP: 4 ranks in two interleaved groups under hetccl (gradient buckets take the hierarchical all-reduce)"
LOSS_FILE=$out/loss_hetccl4.txt LD_PRELOAD=$lib $run -n 4 --timeout 600 --rank-env 0:HETCCL_GROUP=a \
  --rank-env 1:HETCCL_GROUP=b --rank-env 2:HETCCL_GROUP=a --rank-env 3:HETCCL_GROUP=b \
  $py "$root/tests/torch/ddp.py" || fail=1
compare_losses "$out/loss_ref.txt" "$out/loss_hetccl4.txt" "4 ranks, groups a b a b" 40 || fail=1

echo "== 4. the real NCCL stays private: LD_DEBUG=bindings"
LD_DEBUG=bindings LD_DEBUG_OUTPUT=$out/bindings LD_PRELOAD=$lib $run -n 1 --timeout 300 \
  $py "$root/tests/torch/ops.py" >/dev/null 2>&1
echo "-- torch's calls:"
cat $out/bindings.* 2>/dev/null | grep -E "binding file .*libtorch_cuda.* to .*: normal symbol \`ncclAllReduce'" | head -2
echo "-- the real NCCL's own nccl* calls that reach hetccl's exports (each goes back to the real"
echo "   function: its comm carries NCCL's magic, or its caller is the real library):"
cat $out/bindings.* 2>/dev/null | grep -E "binding file .*libnccl[^ ]* \[0\] to .*libhetccl" | \
  grep -oE "symbol \`[a-zA-Z]+" | sort | uniq -c | sort -rn | head -20
rm -f $out/bindings.*
[ $fail = 0 ] && echo "tests/torch: PASS" || echo "tests/torch: FAIL"
exit $fail
