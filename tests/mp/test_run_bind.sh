#!/usr/bin/env bash
# hetccl-run --bind core and --cpu-list: each rank may run on exactly the
# CPU it was given (read back from /proc/self/status, which the kernel
# writes), and bad lists are usage errors (exit 2).
set -euo pipefail
run=$1
mine=$(grep Cpus_allowed_list: /proc/self/status | cut -f2)
# The CPUs of our mask in order, as the launcher counts them.
cpus=()
for part in ${mine//,/ }; do
  lo=${part%-*} hi=${part#*-}
  for ((c = lo; c <= hi; c++)); do cpus+=("$c"); done
done
n=${#cpus[@]}
(( n > 4 )) && n=4
report='echo "$RANK $(grep Cpus_allowed_list: /proc/self/status | cut -f2)"'
expect=""
for ((r = 0; r < n; r++)); do expect+="$r ${cpus[r]}"$'\n'; done
got=$("$run" -n "$n" --bind core -- sh -c "$report" | sed 's/^\[[0-9]*\] //' | sort -n)
[ "$got"$'\n' = "$expect" ] || { echo "--bind core: expected"$'\n'"$expect"", got"$'\n'"$got"; exit 1; }
# --cpu-list in reverse order of our mask's first two CPUs (or one CPU twice).
last=${cpus[$((n - 1))]}
got=$("$run" -n 2 --cpu-list "$last,${cpus[0]}" -- sh -c "$report" | sed 's/^\[[0-9]*\] //' | sort -n)
[ "$got" = "0 $last"$'\n'"1 ${cpus[0]}" ] || { echo "--cpu-list $last,${cpus[0]}: got"$'\n'"$got"; exit 1; }
rc=0; "$run" -n $(( ${#cpus[@]} + 1 )) --bind core true 2>/dev/null || rc=$?
[ $rc = 2 ] || { echo "--bind core with more ranks than CPUs: exit $rc, expected 2"; exit 1; }
rc=0; "$run" -n 1 --cpu-list 0x true 2>/dev/null || rc=$?
[ $rc = 2 ] || { echo "--cpu-list 0x: exit $rc, expected 2"; exit 1; }
echo "ok: ranks bound to ${cpus[*]:0:n}"
