#!/usr/bin/env bash
# Runs a command inside a small virtual machine that has Soft-RoCE (rdma_rxe) devices, so the
# ib transport is tested on real verbs on a machine whose own kernel has no RDMA.
#
#   scripts/rxe-vm.sh [--devices N] [--mem MiB] [--cpus N] -- CMD [ARGS...]
#
# The guest boots Debian's own kernel (package linux-image-amd64's current image, fetched with
# apt-get download and unpacked with dpkg -x into the cache, never installed) under qemu's
# software emulation (TCG), with a busybox initramfs. It shares this machine's root read-only
# over virtio-9p and the build folder read-write, chroots into the shared root, so CMD runs the
# binaries built here with this machine's libraries (libibverbs and its rxe provider), in the
# directory the script was started from. Before CMD: crc32_generic (rdma_rxe's crc32 needs it),
# rdma_rxe, dummy and veth are loaded, the rxe devices are created and tmpfs is mounted on
# /dev/shm and /tmp; the entries of the host's /tmp that hold the checkout, the build folder,
# the cache or the current directory (a CI clone under /tmp) are bound into the guest's /tmp,
# so CMD runs wherever the checkout lies. With --devices 1: rxe0 on dummy0, one RoCE v2 GID (index 0, the IPv6
# link-local address); rxe loops traffic to its own address back internally. With --devices 2
# (the default: two "NICs"): rxe0 and rxe1 on the two ends of a veth pair, 10.200.0.1 and
# .2 (GID index 1, IPv4-mapped, RoCE v2), with policy routing that sends traffic for the other
# end's address out of the veth (two rxe devices on two dummy interfaces cannot reach each
# other: a packet to a local address arrives on lo, where no rxe device listens). The guest
# needs no network.
#
# Exit status: CMD's, or 77 (ctest's SKIP_RETURN_CODE) with "SKIPPED: reason" when qemu,
# busybox-static or the kernel package is unavailable here, or 1 when the guest failed to boot.
#
# Environment: RXE_VM_CACHE (default <repo>/build/rxe-vm: kernel, initramfs, run files),
# RXE_VM_SHARE_RW (default <repo>/build: shared read-write), RXE_VM_TIMEOUT (seconds, default
# 1500). TUTTI_*, NCCL_*, GTEST_* variables and PATH-independent settings pass into the guest.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${RXE_VM_CACHE:-$REPO/build/rxe-vm}"
SHARE_RW="${RXE_VM_SHARE_RW:-$REPO/build}"
TIMEOUT="${RXE_VM_TIMEOUT:-1500}"
NDEV=2
MEM=2048
CPUS=2

skip() {
  echo "SKIPPED: $*"
  exit 77
}

while [ $# -gt 0 ]; do
  case "$1" in
    --devices) NDEV="$2"; shift 2; [ "$NDEV" = 1 ] || [ "$NDEV" = 2 ] || { echo "--devices: 1 or 2" >&2; exit 2; } ;;
    --mem) MEM="$2"; shift 2 ;;
    --cpus) CPUS="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: $0 [--devices N] [--mem MiB] [--cpus N] -- CMD [ARGS...]" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "rxe-vm: no command given" >&2; exit 2; }

QEMU="$(command -v qemu-system-x86_64 || true)"
[ -n "$QEMU" ] || skip "qemu-system-x86_64 not found (apt-get install qemu-system-x86)"
BUSYBOX=/bin/busybox
[ -x "$BUSYBOX" ] && [[ "$(LC_ALL=C ldd "$BUSYBOX" 2>&1 || true)" == *"not a dynamic"* ]] ||
  skip "no static busybox at $BUSYBOX (apt-get install busybox-static)"
command -v rdma >/dev/null || skip "the rdma tool (iproute2) is missing"
mkdir -p "$CACHE"

# ---- the kernel: linux-image-amd64's current image, unpacked (not installed) in the cache ----
fetch_kernel() {
  local pkg deb
  pkg="$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -1)"
  [ -n "$pkg" ] || skip "apt knows no linux-image-amd64 (no Debian archive configured?)"
  if [ ! -f "$CACHE/kernel/$pkg.ok" ]; then
    rm -rf "$CACHE/kernel" && mkdir -p "$CACHE/kernel"
    (cd "$CACHE/kernel" && apt-get download "$pkg" >/dev/null 2>&1) ||
      skip "apt-get download $pkg failed (no access to the Debian archive?)"
    deb="$(ls "$CACHE"/kernel/*.deb | head -1)"
    dpkg -x "$deb" "$CACHE/kernel/root" || skip "dpkg -x $deb failed"
    rm -f "$deb"
    KVER="$(ls "$CACHE/kernel/root/lib/modules" | head -1)"
    "$BUSYBOX" depmod -b "$CACHE/kernel/root" "$KVER" # the module index busybox modprobe reads
    touch "$CACHE/kernel/$pkg.ok"
  fi
  KVER="$(ls "$CACHE/kernel/root/lib/modules" | head -1)"
  KERNEL="$CACHE/kernel/root/boot/vmlinuz-$KVER"
  [ -f "$KERNEL" ] || skip "no kernel image in $pkg"
}
fetch_kernel

# ---- the initramfs: busybox, the virtio-9p modules, and an init that runs the command ----
RUN="$(mktemp -d "$CACHE/run.XXXXXX")"
trap 'rm -rf "$RUN"' EXIT
MODDIR="$CACHE/kernel/root/lib/modules/$KVER"
NINE_P="virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci 9pnet \
9pnet_virtio netfs fscache 9p"
mkdir -p "$RUN/initrd"/{bin,dev,proc,sys,mod,newroot,lib/modules}
cp "$BUSYBOX" "$RUN/initrd/bin/busybox"
for m in $NINE_P; do
  f="$(find "$MODDIR/kernel" -name "$m.ko" | head -1)"
  [ -n "$f" ] || skip "module $m.ko missing from the kernel package"
  cp "$f" "$RUN/initrd/mod/"
done

# The command, its directory and its settings, as a script the guest runs in the chroot.
{
  echo "cd '$PWD' || exit 1"
  echo "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp"
  while IFS= read -r -d '' kv; do
    case "$kv" in TUTTI_* | NCCL_* | GTEST_* | RXE_*) printf 'export %q\n' "$kv" ;; esac
  done < <(env -0)
  printf 'exec'
  printf ' %q' "$@"
  echo
} >"$RUN/cmd.sh"

# The first components of the host's /tmp the guest needs to see through its own /tmp.
TMP_KEEP=""
for d in "$REPO" "$PWD" "$SHARE_RW" "$CACHE"; do
  case "$d/" in
    /tmp/?*) t="${d#/tmp/}" t="${t%%/*}"
      [[ " $TMP_KEEP " == *" $t "* ]] || TMP_KEEP="$TMP_KEEP $t" ;;
  esac
done
[[ "$TMP_KEEP" != *[!A-Za-z0-9._\ -]* ]] ||
  { echo "rxe-vm: a folder under /tmp with an unusual name:$TMP_KEEP" >&2; exit 2; }

cat >"$RUN/initrd/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
fail() { echo "rxe-vm guest: \$*"; echo 1 > /newroot$RUN/rc 2>/dev/null; poweroff -f; }
for m in $NINE_P; do insmod /mod/\$m.ko || { echo "rxe-vm guest: insmod \$m failed"; poweroff -f; }; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose hostroot /newroot ||
  { echo "rxe-vm guest: cannot mount the host root"; poweroff -f; }
mount --bind /newroot$MODDIR/.. /lib/modules || fail "no module tree"
modprobe crc32_generic && modprobe rdma_rxe && modprobe dummy numdummies=1 && modprobe veth ||
  fail "cannot load crc32_generic, rdma_rxe, dummy"
mount -t proc proc /newroot/proc
mount -t sysfs sys /newroot/sys
mount -t devtmpfs dev /newroot/dev
mkdir -p /newroot/dev/shm
mount -t tmpfs -o mode=1777 shm /newroot/dev/shm
# The guest's own /tmp is a tmpfs (rendezvous files, mkstemp); the host's /tmp entries that hold
# the checkout, the build folder, the cache or the working directory are bound back into it.
mkdir -p /hosttmp && mount --bind /newroot/tmp /hosttmp || fail "cannot keep the host's /tmp"
mount -t tmpfs -o mode=1777 tmp /newroot/tmp
for t in $TMP_KEEP; do
  mkdir -p /newroot/tmp/\$t && mount --bind /hosttmp/\$t /newroot/tmp/\$t ||
    fail "cannot bind the host's /tmp/\$t"
done
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 sharerw /newroot$SHARE_RW ||
  fail "cannot mount $SHARE_RW read-write"
hostname rxe-vm
ip link set lo up
hip() { chroot /newroot /usr/bin/ip "\$@"; } # iproute2 (busybox ip knows no veth)
if [ $NDEV -eq 1 ]; then
  hip link set dummy0 up || fail "no dummy0"
  chroot /newroot rdma link add rxe0 type rxe netdev dummy0 || fail "rdma link add rxe0 failed"
else
  # rxe0 on veth0 (10.200.0.1), rxe1 on veth1 (10.200.0.2), the two ends of one veth pair. The
  # rules send what this host addresses to the other end's address out of its own end (iif lo:
  # locally sent), so it arrives on the other veth and reaches the rxe device there; the local
  # table follows, for what arrives.
  hip link add veth0 type veth peer name veth1 || fail "cannot create a veth pair"
  hip addr add 10.200.0.1/24 dev veth0 && hip addr add 10.200.0.2/24 dev veth1 || fail "addresses"
  hip link set veth0 up && hip link set veth1 up || fail "veth up"
  for f in all/accept_local veth0/accept_local veth1/accept_local; do echo 1 > /proc/sys/net/ipv4/conf/\$f; done
  for f in all/rp_filter veth0/rp_filter veth1/rp_filter; do echo 0 > /proc/sys/net/ipv4/conf/\$f; done
  hip rule add pref 100 lookup local && hip rule del pref 0 || fail "ip rule"
  hip route add 10.200.0.2 dev veth0 src 10.200.0.1 table 100
  hip route add 10.200.0.1 dev veth1 src 10.200.0.2 table 101
  hip rule add pref 10 to 10.200.0.2 iif lo lookup 100
  hip rule add pref 11 to 10.200.0.1 iif lo lookup 101
  chroot /newroot rdma link add rxe0 type rxe netdev veth0 || fail "rdma link add rxe0 failed"
  chroot /newroot rdma link add rxe1 type rxe netdev veth1 || fail "rdma link add rxe1 failed"
fi
chroot /newroot /bin/bash $RUN/cmd.sh < /dev/console > /dev/console 2>&1
echo \$? > /newroot$RUN/rc
sync
poweroff -f
EOF
chmod +x "$RUN/initrd/init"
(cd "$RUN/initrd" && find . | "$BUSYBOX" cpio -o -H newc 2>/dev/null | gzip -1 >"$RUN/initrd.gz")

# ---- boot: TCG, serial console on stdout; the guest powers itself off after CMD ----
set +e
timeout "$TIMEOUT" "$QEMU" -machine q35 -accel tcg,thread=multi -cpu max -smp "$CPUS" -m "$MEM" \
  -nodefaults -no-reboot -display none -chardev stdio,id=con,signal=off -serial chardev:con \
  -kernel "$KERNEL" -initrd "$RUN/initrd.gz" \
  -append "console=ttyS0 quiet loglevel=3 panic=-1 no_timer_check rdinit=/init" \
  -fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap \
  -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
  -fsdev local,id=sharerw,path="$SHARE_RW",security_model=none,multidevs=remap \
  -device virtio-9p-pci,fsdev=sharerw,mount_tag=sharerw </dev/null | sed -u 's/\r$//'
qrc=${PIPESTATUS[0]}
set -e
if [ ! -f "$RUN/rc" ]; then
  [ "$qrc" -eq 124 ] && echo "rxe-vm: the guest ran past RXE_VM_TIMEOUT=${TIMEOUT}s" >&2
  echo "rxe-vm: the guest did not report the command's exit status (qemu status $qrc)" >&2
  exit 1
fi
exit "$(cat "$RUN/rc")"
