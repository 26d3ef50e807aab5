#!/usr/bin/env bash
# The drop-in exports what PyTorch imports and all of nccl.h 2.28.9, each as
# a weak nccl<X> and a strong pnccl<X> at one address, and its SONAME is
# libnccl.so.2.
#   check_nccl_symbols.sh <libhetccl.so of build/nccl> <shared/reference dir>
set -euo pipefail
lib=$1 ref=$2
for f in torch-2.11-nccl-imports.txt nccl-h-2.28.9-functions.txt; do
  [ -f "$ref/$f" ] || { echo "skip: $ref/$f not found"; exit 77; }
done
fail=0
readelf -d "$lib" | grep -q 'SONAME.*\[libnccl.so.2\]' || { echo "SONAME is not libnccl.so.2"; fail=1; }
syms=$(nm -D --defined-only "$lib")
wanted=$(cat "$ref/torch-2.11-nccl-imports.txt" "$ref/nccl-h-2.28.9-functions.txt" | sort -u)
for s in $wanted; do
  weak=$(awk -v s="$s" '$3 == s && $2 == "W" {print $1}' <<<"$syms")
  strong=$(awk -v s="p$s" '$3 == s && $2 == "T" {print $1}' <<<"$syms")
  if [ -z "$weak" ] || [ -z "$strong" ]; then echo "missing: weak $s or strong p$s"; fail=1
  elif [ "$weak" != "$strong" ]; then echo "$s and p$s differ in address"; fail=1; fi
done
[ $fail = 0 ] && echo "nccl symbols: $(wc -l <<<"$wanted") functions exported as weak nccl* + strong pnccl*, SONAME libnccl.so.2"
exit $fail
