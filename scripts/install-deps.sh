#!/usr/bin/env bash
# Installs what building and testing hetccl needs and a fresh Debian machine
# may lack. Quiet and quick when everything is there already.
#
# ROCm's HIP runtime (Debian bookworm packages HIP 5.2: libamdhip64-5, with
# hipRTC inside it, and libamdhip64-dev for the headers) is installed too,
# although no machine here has an AMD GPU: the HIP backend then loads the
# real library and reports "no device" (ctest device_hip_absent), hipRTC
# compiles the reduction kernels for gfx90a (gpu_kernels_host), and the
# constants hip.c copies are checked against the headers at compile time.
# hipcc (clang-15 with the amdgcn target) is left out: hipRTC already
# compiles the kernels, and it would add LLVM's development packages.
#
#   scripts/install-deps.sh      building and the test suite
#   scripts/install-deps.sh ib   the soft-RoCE VM tests (tests/ib/rxe_vms.sh):
#                                qemu, cpio and kmod (depmod, modprobe) too
set -euo pipefail
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v cc >/dev/null || need+=(gcc)
command -v ip >/dev/null || need+=(iproute2)
command -v python3 >/dev/null || need+=(python3)
optional=()
# clang-format too, for ctest `format` (which skips without it).
command -v clang-format >/dev/null || optional+=(clang-format)
if grep -qs bookworm /etc/os-release; then
  dpkg -s libamdhip64-5 >/dev/null 2>&1 || optional+=(libamdhip64-5)
  dpkg -s libamdhip64-dev >/dev/null 2>&1 || optional+=(libamdhip64-dev)
fi
if [ "${1:-}" = ib ]; then
  command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
  command -v cpio >/dev/null || need+=(cpio)
  command -v depmod >/dev/null || need+=(kmod)
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing ${need[*]}; run as root or install them" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# Optional: without them the HIP tests and `format` skip (saying so), nothing fails.
if [ ${#optional[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: ${optional[*]} not installed (not root); the tests that need them will skip" >&2
  elif ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${optional[@]}" >/dev/null; }; then
    echo "install-deps: could not install ${optional[*]}; the tests that need them will skip" >&2
  fi
fi
