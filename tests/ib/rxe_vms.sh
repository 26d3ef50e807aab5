#!/usr/bin/env bash
# Two hosts with a real verbs stack: two qemu VMs, each running Debian's own
# stock kernel with soft-RoCE (rdma_rxe) on a virtio NIC, joined by one
# virtual wire (a unix stream socket between the two qemu processes). The
# host's / is shared read-only into each VM (9p, with a tmpfs overlay on top),
# so a guest script runs binaries built here, with this host's libraries,
# under `chroot /host`. Nothing leaves the two VMs: no NIC of theirs reaches
# this host's network.
#
#   tests/ib/rxe_vms.sh GUEST_SCRIPT [ARGS...]
#
# GUEST_SCRIPT (a path on this host) runs in both VMs as
#   chroot /host sh GUEST_SCRIPT ARGS...
# with ROLE=a|b, MY_IP, PEER_IP (10.0.3.1 for a, 10.0.3.2 for b), RXE_DEV=rxe0,
# GIDX (the RoCEv2 IPv4 GID index) and OUT (a folder shared by both VMs and
# this host: $work/out, kept after the run). Exit status: 0 when the script
# returned 0 in both VMs, 1 otherwise, 77 (skip) when this host cannot boot
# the VMs (not root, no apt to fetch qemu or the Debian kernel, no network
# for the first download), saying why.
#
# Knobs: HC_IB_VM_CACHE (downloaded debs and their extraction; default
# /var/cache/hetccl-ib-vm), HC_IB_VM_WORK (initramfs, consoles, out/;
# default a fresh folder under /tmp, removed after a pass), HC_IB_VM_MEM (MiB per VM, 1024),
# HC_IB_VM_SMP (vCPUs per VM, 1), HC_IB_VM_TIMEOUT (seconds a VM may
# run, 900), HC_IB_VM_MTU (9000: rxe's active MTU is then 4096).
#
# Facts this rests on (learnt booting it on the CI machines):
# - their /dev/kvm, where present, runs only PVM guests, so qemu emulates the
#   CPU (TCG): a boot takes ~20 s, rxe's retransmit timers fire often (never
#   assert zero retries), and bandwidth figures mean nothing;
# - rdma_rxe allocates the "crc32" hash when a device is added, and nothing in
#   the guest autoloads crc32_generic: it is loaded explicitly;
# - glibc dlopen()s libgcc_s.so.1 for thread exit; the chroot has the host's.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
skip() { echo "skip: $*"; exit 77; }

[ $# -ge 1 ] || { echo "usage: $0 GUEST_SCRIPT [ARGS...]" >&2; exit 2; }
guest_script=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shift
[ -r "$guest_script" ] || { echo "$guest_script: not readable" >&2; exit 2; }
[ "$(uname -m)" = x86_64 ] || skip "the VM recipe is for x86_64 hosts"
[ "$(id -u)" = 0 ] || skip "needs root (apt for qemu and the Debian kernel, 9p export of /)"
command -v apt-get >/dev/null || skip "needs a Debian-like host (apt-get)"
"$root/scripts/install-deps.sh" ib || skip "could not install qemu-system-x86, cpio, kmod"

cache=${HC_IB_VM_CACHE:-/var/cache/hetccl-ib-vm}
work=${HC_IB_VM_WORK:-}
own_work=0
[ -n "$work" ] || { work=$(mktemp -d /tmp/hetccl-ib-vm.XXXXXX); own_work=1; }
mem=${HC_IB_VM_MEM:-1024}
smp=${HC_IB_VM_SMP:-1}
vm_timeout=${HC_IB_VM_TIMEOUT:-900}
mtu=${HC_IB_VM_MTU:-9000}
mkdir -p "$cache/debs" "$work/out"
chmod 777 "$work/out"
t0=$(date +%s)
say() { echo "[rxe-vms $(($(date +%s) - t0))s] $*"; }

# ---- the Debian kernel, rdma-core and busybox, unpacked (never installed) ----
# One run at a time fills the cache (ctest -j, two worktrees).
exec 9>"$cache/.lock"
flock 9 2>/dev/null || true
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
if [ -z "$kpkg" ]; then
  apt-get update -qq >/dev/null 2>&1 || true
  kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
fi
[ -n "$kpkg" ] || skip "apt knows no linux-image-amd64 (no Debian archive configured?)"
kver=${kpkg#linux-image-}
pkgs="$kpkg busybox-static libibverbs1 ibverbs-providers libnl-3-200 libnl-route-3-200 iproute2 libmnl0
      libbsd0 libmd0 ibverbs-utils perftest librdmacm1 libibumad3 libpci3"
missing=()
for p in $pkgs; do ls "$cache/debs/${p}"_*.deb >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  say "downloading ${missing[*]}"
  chmod 777 "$cache/debs"
  (cd "$cache/debs" && apt-get download "${missing[@]}" >/dev/null 2>&1) ||
    { apt-get update -qq >/dev/null 2>&1 && (cd "$cache/debs" && apt-get download "${missing[@]}" >/dev/null 2>&1); } ||
    skip "apt-get download ${missing[*]} failed (no network to the Debian archive?)"
fi
x=$cache/x
stamp="$x/.extracted-$(ls "$cache/debs" | md5sum | cut -c1-12)"
if [ ! -e "$stamp" ]; then
  say "unpacking $(ls "$cache/debs" | wc -l) debs"
  rm -rf "$x" && mkdir -p "$x"
  for d in "$cache"/debs/*.deb; do dpkg -x "$d" "$x"; done
  depmod -b "$x" "$kver"
  touch "$stamp"
fi
vmlinuz=$x/boot/vmlinuz-$kver
[ -r "$vmlinuz" ] || skip "no kernel image at $vmlinuz"

# ---- initramfs: busybox, the modules in dependency order, ip/rdma, verbs ----
r=$work/root
rm -rf "$r"
mkdir -p "$r"/{bin,sbin,etc,proc,sys,dev,tmp,run,host,hostro,out,usr/bin,usr/lib64,usr/lib/modules} \
  "$r/usr/lib/x86_64-linux-gnu/libibverbs" "$r/etc/libibverbs.d"
ln -s usr/lib "$r/lib"
ln -s usr/lib64 "$r/lib64"
cp "$x/bin/busybox" "$r/bin/busybox"
for a in $("$r/bin/busybox" --list); do [ -e "$r/bin/$a" ] || ln -s busybox "$r/bin/$a"; done
: >"$r/etc/modules.order"
for m in virtio_pci virtio_net crc32_generic rdma_rxe ib_uverbs 9p 9pnet_virtio overlay; do
  modprobe -d "$x" -S "$kver" --show-depends "$m"
done | awk '$1=="insmod" && !seen[$2]++ {print $2}' | while read -r ko; do
  cp "$ko" "$r/usr/lib/modules/"
  basename "$ko" >>"$r/etc/modules.order"
done
xlib="$x/usr/lib/x86_64-linux-gnu:$x/lib/x86_64-linux-gnu"
copy_closure() { # an ELF file: its shared libraries, from the unpacked debs first
  LD_LIBRARY_PATH=$xlib ldd "$1" 2>/dev/null | awk '/=> \//{print $3} /^\t\/.*ld-linux/{print $1}' |
    while read -r lib; do
      case $lib in
        */ld-linux-x86-64.so.2) cp -nL "$lib" "$r/usr/lib64/" ;;
        *) cp -nL "$lib" "$r/usr/lib/x86_64-linux-gnu/" ;;
      esac
    done
}
# busybox's ip sets links and addresses; iproute2's rdma adds the rxe device.
# ibv_devinfo and ib_write_bw (bench/ib) go to guest scripts too.
for b in usr/bin/rdma sbin/rdma usr/sbin/rdma bin/rdma usr/bin/ibv_devinfo usr/bin/ib_write_bw; do
  [ -x "$x/$b" ] || continue
  cp "$x/$b" "$r/usr/bin/"
  copy_closure "$r/usr/bin/${b##*/}"
done
[ -x "$r/usr/bin/rdma" ] || skip "the iproute2 deb has no rdma tool"
# The verbs stack a guest program dlopen()s: libibverbs, the rxe provider and
# its driver file. They are also laid over the host's tree in the guest (a
# host without rdma-core still runs the tests).
cp -L "$x"/usr/lib/x86_64-linux-gnu/libibverbs.so.1 "$r/usr/lib/x86_64-linux-gnu/"
cp -L "$x"/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so "$r/usr/lib/x86_64-linux-gnu/libibverbs/"
cp "$x/etc/libibverbs.d/rxe.driver" "$r/etc/libibverbs.d/"
copy_closure "$r/usr/lib/x86_64-linux-gnu/libibverbs.so.1"
echo "/usr/lib/x86_64-linux-gnu" >"$r/etc/ld.so.conf"
ldconfig -r "$r" 2>/dev/null || true
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$r/etc/passwd"
printf 'root:x:0:\n' >"$r/etc/group"
{
  printf 'MTU=%s\n' "$mtu"
  printf 'GUEST_SCRIPT=%q\n' "$guest_script"
  printf 'GUEST_ARGS=%q\n' "$*"
  printf 'HOST_CWD=%q\n' "$PWD"
} >"$r/etc/vm.conf"
cp "$here/guest_init.sh" "$r/init"
chmod +x "$r/init"
(cd "$r" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 >"$work/initrd.gz"
flock -u 9 2>/dev/null || true
exec 9>&-
say "initramfs $(du -h "$work/initrd.gz" | cut -f1), kernel $kver, work $work"

# ---- boot both VMs on one wire ----
boot() { # name ip peer netdev-args
  local name=$1 ip=$2 peer=$3
  shift 3
  timeout "$vm_timeout" qemu-system-x86_64 -accel tcg,thread=multi -cpu max -m "$mem" -smp "$smp" \
    -nodefaults -no-reboot -display none -serial stdio -kernel "$vmlinuz" -initrd "$work/initrd.gz" \
    -append "console=ttyS0 quiet panic=-1 net.ifnames=0 hc_role=$name hc_ip=$ip hc_peer=$peer" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs local,path="$work/out",mount_tag=out,security_model=none \
    "$@" </dev/null >"$work/console.$name.log" 2>&1
}
sock=$work/wire.sock
rm -f "$sock"
say "booting VMs a (10.0.3.1) and b (10.0.3.2), TCG, $smp vCPU and $mem MiB each"
boot a 10.0.3.1 10.0.3.2 -netdev stream,id=n0,server=on,addr.type=unix,addr.path="$sock" \
  -device virtio-net-pci,netdev=n0,mac=52:54:00:00:03:01 &
pid_a=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
boot b 10.0.3.2 10.0.3.1 -netdev stream,id=n0,server=off,addr.type=unix,addr.path="$sock" \
  -device virtio-net-pci,netdev=n0,mac=52:54:00:00:03:02 &
pid_b=$!
rc_a=0 rc_b=0
wait $pid_a || rc_a=$?
wait $pid_b || rc_b=$?
rm -f "$sock"
say "VMs stopped (qemu a: $rc_a, b: $rc_b)"
status=0
for n in a b; do
  echo "---- console of VM $n ($work/console.$n.log)"
  tr -d '\r' <"$work/console.$n.log" | grep -av '^\[ *[0-9.]*\] ' || true
  line=$(tr -d '\r' <"$work/console.$n.log" | grep -a '^HC-VM-RESULT ' | tail -1 || true)
  case $line in
    "HC-VM-RESULT rc=0") ;;
    "") echo "VM $n: the guest script did not finish (boot failure or timeout)"; status=1 ;;
    *) echo "VM $n: $line"; status=1 ;;
  esac
done
grep -aq 'HC-VM-SKIP' "$work/console.a.log" "$work/console.b.log" && [ $status != 0 ] &&
  skip "$(grep -ah 'HC-VM-SKIP' "$work/console.a.log" | head -1)"
if [ $status = 0 ] && [ $own_work = 1 ]; then
  rm -rf "$work" # everything worth reading was printed above
  say "done: pass"
else
  say "done: $([ $status = 0 ] && echo pass || echo FAIL); logs and out/ in $work"
fi
exit $status
