#!/usr/bin/env bash
# Chaos: start 4-rank jobs (hetccl-perf with checking on), kill -9 one rank
# at a random moment, and watch the survivors: each must exit on its own
# (with an error, or 0 if it had already finished) within HANG_S seconds;
# or, if the victim was killed before it joined the rendezvous (no "joined
# the root" line yet), within HETCCL_TIMEOUT + HANG_S: nothing tells a rank
# that never arrived from a slow one, so the survivors wait for it until
# the rendezvous's deadline (tests/mp/check_missing_rank.sh).
# Counts hangs and wrong results; prints the time from the kill until the
# last survivor exited (the detection time).
#   tests/chaos/run.sh [TRIES] [BUILD_DIR]        default 100, build
set -uo pipefail
tries=${1:-100}
build=${2:-build}
perf=$build/tools/hetccl-perf
hang_s=${HANG_S:-30}
n=4
[ -x "$perf" ] || { echo "no $perf: build first"; exit 2; }
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
hangs=0 wrong=0 detect_ms=()
colls=(all_reduce all_gather reduce_scatter broadcast alltoall)
for ((t = 1; t <= tries; t++)); do
  port=$((20000 + RANDOM % 30000))
  secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  coll=${colls[RANDOM % ${#colls[@]}]}
  pids=()
  for ((r = 0; r < n; r++)); do
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r HETCCL_SECRET=$secret \
      HETCCL_TIMEOUT=$((hang_s * 2)) HETCCL_DEBUG=INFO HETCCL_DEBUG_SUBSYS=BOOT "$perf" "$coll" -b 1K -e 8M -f 4 -n 10 -c 1 >"$tmp/out.$r" 2>&1 &
    pids+=($!)
    disown $!
  done
  victim=$((RANDOM % n))
  # Half the kills land anywhere (init included), half once the collectives
  # run (rank 0 has printed its table header), at a random moment after.
  if ((t % 2 == 0)); then
    for ((w = 0; w < 200; w++)); do grep -q '(B)' "$tmp/out.0" 2>/dev/null && break; sleep 0.05; done
  fi
  sleep "0.$((RANDOM % 10))$((RANDOM % 10))"
  kill -9 "${pids[victim]}" 2>/dev/null
  killed_at=$(date +%s%N)
  limit=$hang_s
  if ! grep -q "joined the root" "$tmp/out.$victim" 2>/dev/null; then
    limit=$((hang_s * 3)) # HETCCL_TIMEOUT + HANG_S
    echo "try $t ($coll): rank $victim killed before it joined the rendezvous: limit ${limit}s"
  fi
  limit_ns=$((killed_at + limit * 1000000000))
  for ((r = 0; r < n; r++)); do
    [ $r = $victim ] && continue
    while kill -0 "${pids[r]}" 2>/dev/null && (($(date +%s%N) < limit_ns)); do sleep 0.05; done
    if kill -0 "${pids[r]}" 2>/dev/null; then
      hangs=$((hangs + 1))
      echo "try $t ($coll): rank $r still running ${limit}s after rank $victim was killed"
      tail -3 "$tmp/out.$r"
      kill -9 "${pids[r]}"
    fi
  done
  last_exit=$(date +%s%N)
  detect_ms+=($(((last_exit - killed_at) / 1000000)))
  # A wrong result is a checked row with #wrong != 0 (columns 9 and 13).
  for ((r = 0; r < n; r++)); do
    if awk '$1 ~ /^[0-9]+$/ && NF >= 13 && ($9 != 0 || $13 != 0) {bad=1} END {exit !bad}' "$tmp/out.$r"; then
      wrong=$((wrong + 1))
      echo "try $t ($coll): wrong results on rank $r"
    fi
  done
done
sorted=$(printf '%s\n' "${detect_ms[@]}" | sort -n)
median=$(sed -n "$(((${#detect_ms[@]} + 1) / 2))p" <<<"$sorted")
max=$(tail -1 <<<"$sorted")
echo "chaos: $tries tries, $hangs hangs, $wrong wrong results; survivors out after the kill: median ${median} ms, max ${max} ms (checked every 50 ms)"
[ $hangs = 0 ] && [ $wrong = 0 ]
