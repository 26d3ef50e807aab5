#!/usr/bin/env bash
# On the GPU machine: runs one command under a watchdog; if it is still
# running after SECONDS_LIMIT (default 60), prints every thread's stack
# (gdb when present, else the kernel's view from /proc) and kills it.
#   tests/gpu/diag.sh [seconds] command args...
# The output is line-buffered so that what was printed survives the kill.
set -uo pipefail
limit=60
case ${1:-} in ''|*[!0-9]*) ;; *) limit=$1; shift ;; esac
stdbuf -oL -eL "$@" &
pid=$!
for _ in $(seq $((limit * 10))); do
  kill -0 "$pid" 2>/dev/null || { wait "$pid"; exit $?; }
  sleep 0.1
done
echo "diag: '$*' still running after ${limit} s; its threads:"
if command -v gdb >/dev/null; then
  gdb -p "$pid" -batch -ex "thread apply all bt 12" 2>/dev/null | grep -E '^(Thread|#)' | head -200
else
  for t in /proc/"$pid"/task/*; do
    echo "-- thread ${t##*/} $(cat "$t"/comm) wchan=$(cat "$t"/wchan 2>/dev/null) syscall=$(cut -d' ' -f1 "$t"/syscall 2>/dev/null)"
  done
fi
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
exit 124
