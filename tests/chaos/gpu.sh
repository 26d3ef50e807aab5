#!/usr/bin/env bash
# Chaos on a GPU machine: ranks as processes sharing GPU 0 in groups
# (HETCCL_GROUP a,b or a,b,a,b: every byte crosses hetccl's own path, the
# same-host pairs through shm windows on the streams), one rank killed
# (SIGKILL) before or during a loop of 16 MiB all-reduces, or stopped
# (SIGSTOP). Each survivor must exit on its own: within HANG_S after a
# kill (init included, once the victim had joined hetccl's rendezvous;
# before that, HETCCL_TIMEOUT + HANG_S: a rank that never arrived, for which
# PyTorch's rendezvous and hetccl's each wait at most one HETCCL_TIMEOUT,
# never one after the other), within HETCCL_TIMEOUT (STOP_TIMEOUT) + HANG_S
# after a stop. Kills at a random moment run under HETCCL_TIMEOUT =
# RANDOM_TIMEOUT (default 20 s), so that one landing before the victim
# joined costs 20 s of the budget, not 60.
#   hetccl-native: tests/gpu/test_gpu_faults kill|kill_abort|stop|abort (2 ranks,
#                  windows only) on the real driver;
#   torch:         tests/chaos/gpu_allreduce.py under LD_PRELOAD of
#                  libhetccl.so, 2 and 4 ranks (PyTorch's watchdog polls
#                  ncclCommGetAsyncError and ends the process).
# Prints per try one line, then "tries, hangs, wrong results, survivors'
# time to exit (median, max)". Stops starting tries after BUDGET_S.
# A hung survivor's output and its threads' stacks (gdb, when installed),
# and every rank's output of a try where one read a wrong result, are kept
# in KEEP_DIR (default $OUT, else none); DEBUG_SUBSYS (default BOOT) picks
# the HETCCL_DEBUG=INFO lines they hold. To replay one case: KIND (0-3,
# as below), N (2 or 4) and VICTIM fix what each try does.
#   tests/chaos/gpu.sh [TRIES] [BUILD_DIR]       default 20, build-gpu
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tries=${1:-20}
build=${2:-$root/build-gpu}
hang_s=${HANG_S:-20}
stop_timeout=${STOP_TIMEOUT:-5}
random_timeout=${RANDOM_TIMEOUT:-20}
budget_s=${BUDGET_S:-300}
py=${PYTHON:-python3}
lib=$build/nccl/libhetccl.so
if [ ! -f "$lib" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
    cmake --build "$build" -j "$(nproc)" >"$build.log" 2>&1 || { echo "build FAILED"; tail -20 "$build.log"; exit 1; }
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
keep_dir=${KEEP_DIR:-${OUT:-}}
keep_log() { # what try rank
  [ -n "$keep_dir" ] || return 0
  mkdir -p "$keep_dir"
  cp "$tmp/out.$3" "$keep_dir/$1_try$2_rank$3.log"
  echo "fault at $fault_s (epoch s)" >>"$keep_dir/$1_try$2_rank$3.log"
}
keep_hung() { # try rank
  [ -n "$keep_dir" ] || return 0
  keep_log hung "$1" "$2"
  command -v gdb >/dev/null &&
    timeout 60 gdb -p "${pids[$2]}" -batch -ex 'thread apply all bt' >"$keep_dir/hung_try$1_rank$2.stacks" 2>&1
}
start=$(date +%s)
total=0 hangs=0 wrong=0 exit_ms=()

echo "== hetccl-native: tests/gpu/test_gpu_faults (2 GPU ranks, windows only)"
for mode in kill kill_abort stop abort; do
  t=120
  [ $mode = stop ] && t=$stop_timeout
  out=$(HETCCL_TIMEOUT=$t HETCCL_VENDOR=0 timeout 200 "$build/tests/test_gpu_faults" $mode 2>&1)
  rc=$?
  total=$((total + 1))
  secs=$(sed -n "s/^$mode: the survivor exited \([0-9.]*\) s after the fault/\1/p" <<<"$out")
  [ -n "$secs" ] && exit_ms+=($(awk -v s="$secs" 'BEGIN{printf "%d", s * 1000}'))
  grep -q "a hang" <<<"$out" && hangs=$((hangs + 1))
  [ $rc = 124 ] && hangs=$((hangs + 1))
  echo "native $mode: rc $rc; $(grep -E 'rank 0: |survivor|returned in|checks' <<<"$out" | tr '\n' ' ' | cut -c1-400)"
done

echo "== torch: tests/chaos/gpu_allreduce.py"
for ((t = 1; t <= tries; t++)); do
  if (($(date +%s) - start > budget_s)); then
    echo "time budget of ${budget_s}s spent: $((t - 1)) torch tries"
    break
  fi
  n=${N:-$((t % 2 == 0 ? 4 : 2))}
  kind=${KIND:-$((t % 4))} # 0, 2: kill during the loop; 1: kill at a random moment (init included); 3: SIGSTOP during
  port=$((20000 + RANDOM % 30000))
  timeout_env=60
  [ $kind = 3 ] && timeout_env=$stop_timeout
  [ $kind = 1 ] && timeout_env=$random_timeout
  pids=()
  rm -f "$tmp"/out.*
  for ((r = 0; r < n; r++)); do
    [ $((r % 2)) = 0 ] && g=a || g=b
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r HETCCL_GROUP=$g \
      HETCCL_TIMEOUT=$timeout_env HETCCL_DEBUG=INFO HETCCL_DEBUG_SUBSYS=${DEBUG_SUBSYS:-BOOT} LD_PRELOAD=$lib "$py" "$root/tests/chaos/gpu_allreduce.py" >"$tmp/out.$r" 2>&1 &
    pids+=($!)
    disown $!
  done
  victim=${VICTIM:-$((RANDOM % n))}
  if ((kind != 1)); then
    for ((w = 0; w < 1200; w++)); do grep -q LOOP "$tmp/out.$victim" 2>/dev/null && break; sleep 0.05; done
    sleep "0.$((RANDOM % 10))"
  else
    sleep "$((RANDOM % 6)).$((RANDOM % 10))"
  fi
  sig=KILL what=kill
  [ $kind = 3 ] && sig=STOP what=stop
  kill -$sig "${pids[victim]}" 2>/dev/null
  fault=$(date +%s%N)
  fault_s=$(awk -v ns="$fault" 'BEGIN{printf "%.3f", ns / 1e9}')
  limit=$hang_s
  [ $kind = 3 ] && limit=$((stop_timeout + hang_s))
  line="torch n=$n $what rank $victim:"
  # A kill at a random moment may land in init. Once the victim has joined
  # hetccl's rendezvous (its "joined the root" line), hetccl notices its
  # death at once everywhere in init (the root's watch of its connection,
  # then pids and the bootstrap ring, the vendor's comm created nonblocking
  # and watched): survivors must be out within HANG_S. Before that, the
  # survivors wait for a rank that never arrived: in hetccl's rendezvous
  # (bounded by HETCCL_TIMEOUT) or PyTorch's TCPStore (its own timeout).
  if [ $kind = 1 ] && ! grep -q LOOP "$tmp/out.$victim" 2>/dev/null; then
    if grep -q "joined the root" "$tmp/out.$victim" 2>/dev/null; then
      line="torch n=$n $what rank $victim (in init, after joining):"
    elif [ "$victim" = 0 ]; then
      # Rank 0 also serves PyTorch's TCPStore. A client whose connect timed
      # out retries once after a random delay of up to that timeout (seen:
      # "retrying (try=0, timeout=20000ms, delay=17221ms)"), all before
      # hetccl is called: PyTorch's wait, two timeouts long.
      limit=$((2 * timeout_env + hang_s))
      line="torch n=$n $what rank $victim (in init, before joining; it served PyTorch's store):"
    else
      limit=$((timeout_env + hang_s))
      line="torch n=$n $what rank $victim (in init, before joining):"
    fi
  fi
  # The watch ends by the clock: a count of 50 ms sleeps ran about 3.6%
  # long (each sleep is a fork), so a survivor still running at the limit
  # of 80 s was reported "out after 82.9 s" although the script killed it.
  limit_ns=$((fault + limit * 1000000000))
  for ((r = 0; r < n; r++)); do
    [ $r = $victim ] && continue
    while kill -0 "${pids[r]}" 2>/dev/null && (($(date +%s%N) < limit_ns)); do sleep 0.05; done
    if kill -0 "${pids[r]}" 2>/dev/null; then
      hangs=$((hangs + 1))
      line="$line rank $r HUNG (still running ${limit} s after the $what; last line: $(grep -v '^\s*$' "$tmp/out.$r" | tail -1 | cut -c1-160));"
      keep_hung "$t" "$r"
      kill -9 "${pids[r]}"
    fi
  done
  ms=$((($(date +%s%N) - fault) / 1000000))
  if grep -q DONE "$tmp"/out.* 2>/dev/null; then
    echo "$line the loop had ended before the $what: not counted"
    kill -9 "${pids[victim]}" 2>/dev/null
    kill -CONT "${pids[victim]}" 2>/dev/null
    continue
  fi
  exit_ms+=($ms)
  total=$((total + 1))
  kill -9 "${pids[victim]}" 2>/dev/null
  kill -CONT "${pids[victim]}" 2>/dev/null
  if grep -q WRONG "$tmp"/out.*; then
    wrong=$((wrong + 1)) # tries, not ranks
    for ((r = 0; r < n; r++)); do
      keep_log wrong "$t" "$r"
      grep -q WRONG "$tmp/out.$r" && line="$line $(grep WRONG "$tmp/out.$r" | head -1);"
    done
  fi
  culprit=$(grep -hoE 'rank [0-9]+ \(pid [0-9]+\) exited|waiting for rank [0-9]+|failed because of rank [0-9]+|rank [0-9]+ left|rank [0-9]+ closed its bootstrap' "$tmp"/out.* | sort | uniq -c | tr '\n' ';' | cut -c1-200)
  echo "$line survivors out after $ms ms; errors: $culprit"
done
sorted=($(printf '%s\n' "${exit_ms[@]}" | sort -n))
k=${#sorted[@]}
median=$((k ? sorted[k / 2] : 0))
max=$((k ? sorted[k - 1] : 0))
echo
echo "| tries | hangs | wrong results | survivors' time to exit, median | max |"
echo "|---|---|---|---|---|"
echo "| $total | $hangs | $wrong | $median ms | $max ms |"
echo "(time from the kill or stop until the last survivor exited, checked every 50 ms; a stop waits HETCCL_TIMEOUT=$stop_timeout s)"
[ $hangs = 0 ] && [ $wrong = 0 ]
