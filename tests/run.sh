#!/usr/bin/env bash
# Builds hetccl from nothing and runs the whole test suite (ctest).
#   tests/run.sh                       normal build in build/
#   BUILD_DIR=build-asan SANITIZE=address,undefined tests/run.sh
#   CTEST_ARGS="-L unit" tests/run.sh  a subset
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
case $build in /*) ;; *) build=$root/$build ;; esac
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHETCCL_SANITIZE="${SANITIZE:-}" >/dev/null
cmake --build "$build" -j "$(nproc)"
cd "$build"
# Leaks inside vendor runtimes that hetccl loads are theirs (tests/lsan.supp).
export LSAN_OPTIONS="suppressions=$root/tests/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
# shellcheck disable=SC2086
ctest --output-on-failure ${CTEST_ARGS:-}
