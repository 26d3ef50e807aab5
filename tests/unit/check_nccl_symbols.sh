#!/usr/bin/env bash
# A drop-in exports every name of some lists, each as a weak nccl<X> and a
# strong pnccl<X> at one address (a mangled C++ name, like RCCL's
# ncclCommDump, only defined), and has the SONAME of the library it stands
# in for. Lists: one name a line, '#' comments.
#   check_nccl_symbols.sh <library> <SONAME> <list>...
# The NCCL drop-in: build/nccl/libhetccl.so, libnccl.so.2, PyTorch's CUDA
# imports and nccl.h 2.28.9 (tests/unit/torch-cuda-nccl-imports.txt,
# tests/unit/nccl-h-2.28.9-functions.txt); the RCCL one:
# build/rccl/libhetccl.so, librccl.so.1, tests/unit/torch-rocm-nccl-imports.txt.
set -euo pipefail
lib=$1 soname=$2
shift 2
for f in "$@"; do
  [ -f "$f" ] || { echo "$f not found"; exit 1; }
done
fail=0
readelf -d "$lib" | grep -q "SONAME.*\[$soname\]" || { echo "SONAME is not $soname"; fail=1; }
syms=$(nm -D --defined-only "$lib")
wanted=$(cat "$@" | grep -v '^#' | grep -v '^$' | sort -u)
for s in $wanted; do
  if [[ $s == _Z* ]]; then
    awk -v s="$s" '$3 == s && ($2 == "T" || $2 == "W") {found = 1} END {exit !found}' <<<"$syms" ||
      { echo "missing: $s"; fail=1; }
    continue
  fi
  weak=$(awk -v s="$s" '$3 == s && $2 == "W" {print $1}' <<<"$syms")
  strong=$(awk -v s="p$s" '$3 == s && $2 == "T" {print $1}' <<<"$syms")
  if [ -z "$weak" ] || [ -z "$strong" ]; then echo "missing: weak $s or strong p$s"; fail=1
  elif [ "$weak" != "$strong" ]; then echo "$s and p$s differ in address"; fail=1; fi
done
[ $fail = 0 ] && echo "$(basename "$lib") as $soname: $(wc -l <<<"$wanted") functions exported (weak nccl* + strong pnccl*, C++ names defined)"
exit $fail
