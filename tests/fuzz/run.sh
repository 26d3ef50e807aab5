#!/usr/bin/env bash
# Builds every libFuzzer harness of tests/fuzz/ (clang, -fsanitize=fuzzer,
# address,undefined) against the library sources that parse network bytes,
# and runs each for a bounded time on a copy of its seed corpus. Fails on
# any crash, sanitizer report, failed check, leak or hang (-timeout).
#   tests/fuzz/run.sh                 20 s per harness, all harnesses
#   tests/fuzz/run.sh 60 socket_frames   one harness, 60 s
# Build and work files go to $FUZZ_BUILD (default build-fuzz/); a crashing
# input is left in $FUZZ_BUILD/artifacts/, with the command that replays it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/tests/fuzz
secs=${1:-20}
shift || true
build=${FUZZ_BUILD:-$root/build-fuzz}
case $build in /*) ;; *) build=$root/$build ;; esac
cc=${FUZZ_CC:-clang}

# clang and its fuzzer runtime (Debian: clang, libclang-rt-<ver>-dev).
probe() {
  local d
  d=$(mktemp -d)
  echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' >"$d/p.c"
  "$cc" -fsanitize=fuzzer,address,undefined "$d/p.c" -o "$d/p" >/dev/null 2>&1
  local rc=$?
  rm -rf "$d"
  return $rc
}
if ! probe; then
  if [ "$(id -u)" != 0 ]; then
    echo "fuzz: $cc cannot build libFuzzer harnesses; install clang and libclang-rt-dev (as root)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null
  ver=$("$cc" --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "libclang-rt-$ver-dev" >/dev/null 2>&1 ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libclang-rt-dev >/dev/null
  probe || { echo "fuzz: $cc still cannot link -fsanitize=fuzzer" >&2; exit 1; }
fi

# The parsers live in these files; nothing above net/ is linked.
lib_sources=("$root"/src/util/*.c "$root"/src/bootstrap/bootstrap.c "$root"/src/bootstrap/greet.c "$root"/src/net/socket.c
  "$root"/src/net/socket_progress.c "$root"/src/net/ib_wire.c)
flags=(-std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -fno-sanitize-recover=all
  -Wall -Wextra -Wshadow -Wno-missing-field-initializers -Werror
  -I"$root/src" -I"$root/include" -I"$here")
mkdir -p "$build/obj" "$build/artifacts"
objs=()
for src in "${lib_sources[@]}"; do
  obj=$build/obj/$(basename "$(dirname "$src")")_$(basename "${src%.c}").o
  "$cc" "${flags[@]}" -fsanitize=fuzzer-no-link,address,undefined -c "$src" -o "$obj"
  objs+=("$obj")
done

if [ $# -gt 0 ]; then names=("$@"); else
  names=()
  for f in "$here"/fuzz_*.c; do n=$(basename "${f%.c}"); names+=("${n#fuzz_}"); done
fi
for name in "${names[@]}"; do
  "$cc" "${flags[@]}" -fsanitize=fuzzer,address,undefined "$here/fuzz_$name.c" "${objs[@]}" \
    -o "$build/fuzz_$name" -lpthread -ldl -lm
done

# Longest input worth trying, by harness (records are fixed-size).
max_len() {
  case $1 in socket_frames) echo 4096 ;; bootstrap_hello | bootstrap_reply) echo 1024 ;; *) echo 256 ;; esac
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
printf '%-16s %7s %10s %8s %6s %6s\n' harness seeds execs exec/s cov corpus
for name in "${names[@]}"; do
  work=$build/work/$name
  rm -rf "$work" "$build/artifacts/${name}-"*
  mkdir -p "$work"
  cp "$here/corpus/$name"/* "$work/"
  seeds=$(find "$here/corpus/$name" -type f | wc -l)
  log=$build/fuzz_$name.log
  if "$build/fuzz_$name" -max_total_time="$secs" -max_len="$(max_len "$name")" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$build/artifacts/${name}-" "$work" >"$log" 2>&1; then
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    printf '%-16s %7s %10s %8s %6s %6s\n' "$name" "$seeds" "$execs" "$rate" "$cov" "$(find "$work" -type f | wc -l)"
  else
    failed+=("$name")
    echo "FAIL $name: see $log; replay with:" >&2
    for a in "$build/artifacts/${name}-"*; do [ -e "$a" ] && echo "  $build/fuzz_$name $a" >&2; done
    tail -40 "$log" >&2
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${#names[@]} harnesses, ${secs} s each, no crash"
