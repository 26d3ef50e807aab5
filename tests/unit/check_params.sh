#!/usr/bin/env bash
# The parameter table is the only place a HETCCL_* variable is defined:
#  1. docs/params.md equals `hetccl-info --params` (regenerate with
#     build/tools/hetccl-info --params > docs/params.md);
#  2. every HETCCL_* name that the sources, tools or scripts mention is in the
#     table (a variable read anywhere else is a bug);
#  3. nothing in src/ calls getenv() on a HETCCL_ name directly.
set -euo pipefail
root=$1 info=$2
fail=0
if ! diff -u "$root/docs/params.md" <("$info" --params); then
  echo "docs/params.md is stale: regenerate it with hetccl-info --params" >&2
  fail=1
fi
table=$(sed -n 's/^HC_PARAM(\([A-Z0-9_]*\),.*/HETCCL_\1/p' "$root/src/util/params.def" | sort -u)
used=$(grep -rhoE 'HETCCL_[A-Z][A-Z0-9_]*' "$root/src" "$root/tools" "$root/tests" "$root/bench" "$root/scripts" 2>/dev/null \
  | grep -vE '^HETCCL_(H_|MAJOR|MINOR|PATCH|VERSION_CODE|UNIQUE_ID_BYTES|CONFIG_|SPLIT_NOCOLOR|COMM_NULL|SANITIZE|WERROR)' \
  | sort -u)
for v in $used; do
  if ! grep -qx "$v" <<<"$table"; then
    echo "$v is used but missing from src/util/params.def" >&2
    fail=1
  fi
done
if grep -rnE 'getenv\("HETCCL_' "$root/src"; then
  echo "src/ reads a HETCCL_ variable with getenv(): use hc_param_*()" >&2
  fail=1
fi
[ $fail = 0 ] && echo "params: $(wc -l <<<"$table") variables, table, docs and uses agree"
exit $fail
