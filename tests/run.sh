#!/usr/bin/env bash
# Builds hetccl from nothing and runs the whole test suite (ctest).
#   tests/run.sh                       the full suite: root and the network
#   tests/run.sh --offline             no root, no network: the subset below
#   BUILD_DIR=build-asan SANITIZE=address,undefined tests/run.sh
#   CTEST_ARGS="-L unit" tests/run.sh  a subset
#
# What the full suite needs beyond a C compiler, cmake and python3:
#  - scripts/install-deps.sh installs what is missing with apt-get (root and
#    the network), including Debian's HIP runtime (libamdhip64-5, -dev): the
#    HIP tests load it; without it they skip.
#  - the two-VM soft-RoCE test (ctest label ib) downloads a Debian kernel and
#    about 490 MB of packages with apt-get, and boots two qemu VMs (root).
#  - mp_two_hosts creates network namespaces (root).
# --offline skips install-deps.sh and the ib label; what still cannot run
# (no root, a missing package, no GPU) skips, and the list at the end says why.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
case $build in /*) ;; *) build=$root/$build ;; esac
offline=0
if [ "${1:-}" = --offline ]; then
  offline=1
elif [ $# -gt 0 ]; then
  echo "usage: tests/run.sh [--offline]" >&2
  exit 2
fi
if [ $offline = 1 ]; then
  echo "run.sh --offline: not installing packages (scripts/install-deps.sh needs root and apt);" \
    "not running label ib (the VM test downloads a kernel and ~490 MB)"
  ctest_args=${CTEST_ARGS:--LE ^ib$}
else
  "$root/scripts/install-deps.sh"
  ctest_args=${CTEST_ARGS:-}
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHETCCL_SANITIZE="${SANITIZE:-}" >/dev/null
cmake --build "$build" -j "$(nproc)"
cd "$build"
# Leaks inside vendor runtimes that hetccl loads are theirs (tests/lsan.supp).
export LSAN_OPTIONS="suppressions=$root/tests/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
rc=0
# shellcheck disable=SC2086
ctest --output-on-failure $ctest_args | tee ctest-summary.log || rc=$?
# A skipped test (exit 77) says why in its own output; collect those lines.
skipped=$(awk '/\(Skipped\)$/ {print $3}' ctest-summary.log)
if [ -n "$skipped" ]; then
  echo "Why each skipped test skipped:"
  for t in $skipped; do
    why=$(awk -v t="$t" '$0 ~ "Testing: " t "$" {inside = 1; next}
                         inside && /^<end of output>/ {exit}
                         inside && /skip/ {print; exit}' Testing/Temporary/LastTest.log)
    echo "  $t: ${why:-(no reason printed)}"
  done
fi
exit $rc
