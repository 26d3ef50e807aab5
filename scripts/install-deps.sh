#!/usr/bin/env bash
# Installs what building and testing hetccl needs and a fresh Debian machine
# may lack. Quiet and quick when everything is there already.
#   scripts/install-deps.sh      building and the test suite
#   scripts/install-deps.sh ib   the soft-RoCE VM tests (tests/ib/rxe_vms.sh):
#                                qemu, cpio and kmod (depmod, modprobe) too
set -euo pipefail
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v cc >/dev/null || need+=(gcc)
command -v ip >/dev/null || need+=(iproute2)
command -v python3 >/dev/null || need+=(python3)
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
