#!/bin/sh
# PID 1 of a test VM of tests/ib/rxe_vms.sh: loads the modules, brings the
# virtio NIC up with its address from the kernel command line, adds rxe0 on
# it, mounts the host's / (read-only, a tmpfs overlay on top) at /host, lays
# the unpacked verbs stack over it, runs the guest script under chroot /host
# and powers off. The last line it prints is "HC-VM-RESULT rc=N".
export PATH=/usr/bin:/usr/sbin:/bin:/sbin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
. /etc/vm.conf
ROLE=a IP=10.0.3.1 PEER=10.0.3.2
for w in $(cat /proc/cmdline); do
  case $w in
    hc_role=*) ROLE=${w#*=} ;;
    hc_ip=*) IP=${w#*=} ;;
    hc_peer=*) PEER=${w#*=} ;;
  esac
done
finish() {
  echo "HC-VM-RESULT rc=$1"
  sync
  poweroff -f
}
for m in $(cat /etc/modules.order); do insmod /lib/modules/$m 2>/dev/null || echo "insmod $m failed"; done

ip link set lo up
NIC=$(ls /sys/class/net | grep -v '^lo$' | head -1)
ip link set "$NIC" mtu "$MTU"
ip link set "$NIC" up
ip addr add "$IP/24" dev "$NIC"
rdma link add rxe0 type rxe netdev "$NIC" || { echo "HC-VM-SKIP rdma link add rxe0 failed"; finish 77; }

# The GID of the IPv4-mapped (RoCEv2) address appears a moment after the
# address; only the first entries are read (the table has 1024, slow here).
HEX=$(echo "$IP" | awk -F. '{printf "%02x%02x:%02x%02x", $1, $2, $3, $4}')
GIDX=
for t in $(seq 20); do
  for i in 0 1 2 3 4 5 6 7; do
    [ "$(cat /sys/class/infiniband/rxe0/ports/1/gids/$i 2>/dev/null)" = "0000:0000:0000:0000:0000:ffff:$HEX" ] &&
      { GIDX=$i; break; }
  done
  [ -n "$GIDX" ] && break
  sleep 0.5
done
[ -n "$GIDX" ] || { echo "HC-VM-SKIP no RoCEv2 GID for $IP on rxe0"; finish 77; }
for t in $(seq 120); do ping -c1 -W1 "$PEER" >/dev/null 2>&1 && break; done
echo "rxe0 up on $NIC ($IP, GID index $GIDX), peer $PEER answers"

mkdir -p /tmp/ovl/up /tmp/ovl/work
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot /hostro ||
  { echo "HC-VM-SKIP cannot mount the host's / over 9p"; finish 77; }
mount -t overlay overlay -o lowerdir=/hostro,upperdir=/tmp/ovl/up,workdir=/tmp/ovl/work /host ||
  { echo "HC-VM-SKIP cannot overlay the host's /"; finish 77; }
for d in proc sys dev; do mount --rbind /$d /host/$d; done
mkdir -p /dev/shm && mount -t tmpfs tmpfs /dev/shm
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out /out
mkdir -p /host/hc-out && mount --bind /out /host/hc-out
# The guest's verbs stack and tools over the host's (which may have none);
# nothing the host has is replaced.
mkdir -p /host/usr/lib/x86_64-linux-gnu/libibverbs /host/etc/libibverbs.d
for f in /usr/lib/x86_64-linux-gnu/*.so* /usr/lib/x86_64-linux-gnu/libibverbs/* /etc/libibverbs.d/rxe.driver \
  /usr/bin/ibv_devinfo /usr/bin/ib_write_bw; do
  [ -e "$f" ] && [ ! -e "/host$f" ] && cp "$f" "/host$f"
done

echo "=== guest script ($ROLE): $GUEST_SCRIPT $GUEST_ARGS"
# shellcheck disable=SC2086
chroot /host env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root ROLE="$ROLE" MY_IP="$IP" PEER_IP="$PEER" \
  RXE_DEV=rxe0 GIDX="$GIDX" OUT=/hc-out sh -c 'cd "$1" 2>/dev/null; shift; exec sh "$@"' sh "$HOST_CWD" \
  "$GUEST_SCRIPT" $GUEST_ARGS
rc=$?
echo "=== rxe0 counters (non-zero)"
for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do
  v=$(cat "$f" 2>/dev/null)
  [ "${v:-0}" != 0 ] && echo "  ${f##*/} $v"
done
finish $rc
