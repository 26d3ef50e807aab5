#!/usr/bin/env bash
# bench/cpu/knobs.sh: one hetccl-perf sweep per setting, side by side, to
# find which knob a slow size depends on (wait policy, algorithm, chunk).
#
#   BUILD_DIR=build NS="8 16" COLLS="all_reduce" bench/cpu/knobs.sh [VAR=VAL[,VAR=VAL] ...]
#
# Each argument is one setting (comma-separated environment assignments,
# "-" for the defaults); ranks own their cores (hetccl-run --bind core), or,
# with BIND=none, run unbound, as more ranks than cores must.
# Prints, per collective and rank count, the out-of-place time per call in
# us of every setting at every size (SIZES_MIN..SIZES_MAX, x4), after WARMUP
# untimed calls per size (default 5).
# PLACE=in prints the in-place time instead; PERF_ARGS adds hetccl-perf
# flags and RUN_ARGS hetccl-run flags, e.g. two GPU ranks in two groups:
#   BIND=none NS=2 PERF_ARGS="-G cuda" \
#   RUN_ARGS="--rank-env 0:HETCCL_GROUP=a --rank-env 1:HETCCL_GROUP=b" bench/cpu/knobs.sh ...
set -euo pipefail
BUILD_DIR=${BUILD_DIR:-build}
NS=${NS:-"8 16"}
COLLS=${COLLS:-all_reduce}
SIZES_MIN=${SIZES_MIN:-8}
SIZES_MAX=${SIZES_MAX:-8M}
ITERS=${ITERS:-50}
WARMUP=${WARMUP:-5} # untimed calls before each size
BIND=${BIND:-core}
bind=(--bind core)
[ "$BIND" = none ] && bind=()
read -r -a perf_args <<<"${PERF_ARGS:-}"
read -r -a run_args <<<"${RUN_ARGS:-}"
time_field=7 # hetccl-perf's out-of-place time; 11 the in-place one
[ "${PLACE:-out}" = in ] && time_field=11
settings=("$@")
[ ${#settings[@]} -gt 0 ] || settings=(-)

sweep() { # coll n setting -> "size time" lines
  local coll=$1 n=$2 setting=$3 envs=()
  [ "$setting" = - ] || IFS=, read -r -a envs <<<"$setting"
  env "${envs[@]}" "$BUILD_DIR/tools/hetccl-run" -n "$n" "${bind[@]}" "${run_args[@]}" \
    "$BUILD_DIR/tools/hetccl-perf" "$coll" -b "$SIZES_MIN" -e "$SIZES_MAX" -f 4 \
    -n "$ITERS" -w "$WARMUP" -c 0 "${perf_args[@]}" 2>/dev/null |
    awk -v f=$time_field '{ sub(/^\[ *0\]/, "[0]") } $1 == "[0]" && $2 ~ /^[0-9]+$/ { print $2, $f }'
}

for coll in $COLLS; do
  for n in $NS; do
    echo "## $coll, $n ranks: us per call, ${PLACE:-out} of place"
    tmp=$(mktemp -d)
    for i in "${!settings[@]}"; do sweep "$coll" "$n" "${settings[$i]}" >"$tmp/$i"; done
    printf '%10s' bytes; for s in "${settings[@]}"; do printf ' %18.18s' "$s"; done; echo
    paste -d' ' "$tmp"/* | awk -v k=${#settings[@]} '{ printf "%10s", $1; for (i = 0; i < k; i++) printf " %18s", $(2 * i + 2); print "" }'
    rm -rf "$tmp"
  done
done
