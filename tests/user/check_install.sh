#!/usr/bin/env bash
# cmake --install into a temporary prefix, then move the tree: a consumer
# built with `pkg-config --cflags --libs hetccl` and one built with
# find_package(hetccl) (examples/CMakeLists.txt on its own) must both compile,
# link and run as 2 ranks against the moved tree.
#   check_install.sh <build dir> <examples dir> <hetccl-run> <C compiler>
set -euo pipefail
build=$1 examples=$2 run=$3 cc=$4
command -v pkg-config >/dev/null || { echo "skip: pkg-config not installed"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/first" >/dev/null
mv "$tmp/first" "$tmp/moved"
prefix=$tmp/moved
pc=$(find "$prefix" -name hetccl.pc)
[ -n "$pc" ] || { echo "no hetccl.pc under $prefix"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")
# A sanitizer build's library needs its runtime; the consumer here is not
# instrumented, so the runtime is not first in the link order.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

flags=$(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs hetccl)
echo "pkg-config --cflags --libs hetccl: $flags"
# shellcheck disable=SC2086  # flags are words
"$cc" "$examples/allreduce.c" $flags -o "$tmp/allreduce-pkgconfig"
"$run" -n 2 --timeout 100 "$tmp/allreduce-pkgconfig"

cmake -S "$examples" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" >/dev/null
cmake --build "$tmp/cmake-build" >/dev/null
"$run" -n 2 --timeout 100 "$tmp/cmake-build/allreduce"
echo "installed tree, moved: pkg-config and find_package(hetccl) consumers built and ran"
