#!/bin/bash
# build-rootfs.sh — build a tiny bootable Debian 12 (bookworm) guest for rankwire's Soft-RoCE (rdma_rxe) tests.
#
# Output (in $WORK, default /tmp/softroce):
#   vmlinuz      Debian 12 stock kernel (linux-image-6.1.*-amd64), extracted with dpkg -x (host /boot untouched)
#   initrd.img   the WHOLE guest root filesystem as an uncompressed newc cpio (runs from RAM, no disk image);
#                /init mounts the virtio-9p share "host0" on /mnt/host and runs the script named by
#                softroce.run=<path relative to the share> on the kernel command line, then powers off.
#
# Needs root, network access to a Debian mirror, and: debootstrap cpio kmod
# (apt-get install -y --no-install-recommends debootstrap cpio kmod).
# Re-runnable: an existing $WORK/rootfs is reused unless FRESH=1.
set -euo pipefail

WORK=${WORK:-/tmp/rankwire-softroce}
# Debian mirror: the one apt on this machine already uses (no host name is hard-coded here).
if [ -z "${MIRROR:-}" ]; then
  MIRROR=$({ grep -hsE '^(deb |URIs:)' /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null || true; } \
    | grep -v -- '-security' | sed -E 's/^deb (\[[^]]*\] )?//; s/^URIs: *//' | awk '{print $1}' | grep -E '/debian/?$' | head -n1 || true)
fi
[ -n "${MIRROR:-}" ] || { echo "no Debian mirror found in apt sources; set MIRROR" >&2; exit 2; }
SUITE=bookworm
# Guest packages: libibverbs + the rxe provider (what the rankwire test binaries dlopen),
# ibverbs-utils (ibv_devinfo, for diagnostics), iproute2 (ip, rdma), kmod, procps,
# openssh-server/-client (rwrun's default launch agent, for the two-VM job).
PKGS=ibverbs-providers,libibverbs1,ibverbs-utils,iproute2,kmod,procps,openssh-server,openssh-client
# Kernel modules to put in the guest (dependencies are resolved by modprobe --show-depends).
# crc32_generic/crc32_pclmul: rxe allocates the "crc32" crypto hash (ICRC) when a link is added;
# without it "rdma link add" fails with ENOENT ("rdma_rxe: failed to add <netdev>").
MODS="crc32_generic crc32_pclmul rdma_rxe ib_uverbs veth dummy 9p 9pnet_virtio virtio_net virtio_pci virtio_rng"

mkdir -p "$WORK"
cd "$WORK"
t0=$(date +%s)

# 1. Kernel: newest linux-image-6.1.*-amd64 that linux-image-amd64 points to; only extracted.
if [ ! -f vmlinuz ]; then
  KPKG=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  echo "kernel package: $KPKG"
  rm -rf kpkg && mkdir kpkg
  (cd kpkg && timeout 300 apt-get download -q "$KPKG" && dpkg -x ./*.deb extract)
  cp kpkg/extract/boot/vmlinuz-* vmlinuz
fi
KVER=$(ls kpkg/extract/lib/modules)
echo "kernel version: $KVER"
t1=$(date +%s)

# 2. Root filesystem (minbase + RDMA userspace).
[ "${FRESH:-0}" = 1 ] && rm -rf rootfs
if [ ! -x rootfs/usr/bin/ibv_devinfo ] || [ ! -x rootfs/usr/sbin/sshd ]; then
  rm -rf rootfs
  timeout 1200 debootstrap --variant=minbase --include="$PKGS" "$SUITE" rootfs "$MIRROR"
fi
t2=$(date +%s)
echo "TIMING debootstrap=$((t2-t1))s"

# Shrink: docs, man pages, locales, apt caches are useless in the guest.
rm -rf rootfs/usr/share/{doc,man,info,locale}/* rootfs/var/cache/apt/*.bin rootfs/var/cache/apt/archives/*.deb \
       rootfs/var/lib/apt/lists/* rootfs/usr/lib/udev/hwdb.bin rootfs/usr/lib/udev/hwdb.d

# ssh between the two guests (both boot this image): host keys and a root key pair made
# once here, the key authorized, and the guests' addresses (10.77.1.1, 10.77.1.2, see
# guest-rdma.sh) known with the shared host key, so `ssh -o BatchMode=yes` checks it.
chroot rootfs ssh-keygen -A >/dev/null
mkdir -p rootfs/root/.ssh && chmod 700 rootfs/root/.ssh
[ -f rootfs/root/.ssh/id_ed25519 ] || chroot rootfs ssh-keygen -q -t ed25519 -N '' -f /root/.ssh/id_ed25519
cp rootfs/root/.ssh/id_ed25519.pub rootfs/root/.ssh/authorized_keys
echo "10.77.1.1,10.77.1.2 $(cut -d' ' -f1,2 rootfs/etc/ssh/ssh_host_ed25519_key.pub)" > rootfs/root/.ssh/known_hosts
chmod 600 rootfs/root/.ssh/authorized_keys rootfs/root/.ssh/known_hosts

# 3. Kernel modules: only those needed (plus dependencies), then depmod inside the rootfs.
SRC=$WORK/kpkg/extract   # absolute: modprobe --show-depends prints absolute paths
# the .deb has no modules.dep (its postinst runs depmod): generate it so modprobe can resolve deps
[ -f "$SRC/lib/modules/$KVER/modules.dep" ] || depmod -b "$SRC" "$KVER"
rm -rf "rootfs/lib/modules/$KVER"
mkdir -p "rootfs/lib/modules/$KVER"
cp "$SRC/lib/modules/$KVER"/modules.{order,builtin,builtin.modinfo} "rootfs/lib/modules/$KVER/" 2>/dev/null || true
for m in $MODS; do
  # prints "insmod /path/x.ko" for each dependency; "builtin x" for built-ins (nothing to copy)
  modprobe -d "$SRC" -S "$KVER" --show-depends "$m" | awk '$1=="insmod"{print $2}'
done | sort -u | while read -r ko; do
  rel=${ko#"$SRC"/}
  mkdir -p "rootfs/$(dirname "$rel")"
  cp "$ko" "rootfs/$rel"
done
depmod -b rootfs "$KVER"
echo "modules copied: $(find rootfs/lib/modules -name '*.ko*' | wc -l)"

# 4. /init: PID 1 of the guest.
cat > rootfs/init <<'EOF'
#!/bin/sh
# Guest PID 1: mount pseudo filesystems, mount the 9p share, run the requested script, power off.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm /run /tmp /mnt/host
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
hostname "${softroce_host:-guest}"
ip link set lo up
# no udev in the guest: load the virtio PCI transport explicitly (Debian builds it as a module)
modprobe virtio_pci; modprobe 9pnet_virtio; modprobe 9p
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 host0 /mnt/host || echo "INIT: 9p mount failed"
# kernel command line: softroce.run=<script relative to share>, softroce.arg=<one argument>
RUN=""; ARG=""
for w in $(cat /proc/cmdline); do
  case "$w" in
    softroce.run=*) RUN=${w#softroce.run=} ;;
    softroce.arg=*) ARG=${w#softroce.arg=} ;;
  esac
done
echo "INIT: up after $(cut -d' ' -f1 /proc/uptime)s, running ${RUN:-<none>} $ARG"
if [ -n "$RUN" ] && [ -f "/mnt/host/$RUN" ]; then
  sh "/mnt/host/$RUN" "$ARG"
  echo "INIT: script exit code $?"
else
  echo "INIT: no script; dropping to shell"; sh
fi
sync
echo "INIT: powering off at $(cut -d' ' -f1 /proc/uptime)s"
echo o > /proc/sysrq-trigger   # immediate poweroff (no init system to ask)
sleep 5
EOF
chmod +x rootfs/init

# 5. Pack the rootfs into an (uncompressed) initramfs.
(cd rootfs && find . -xdev | cpio --quiet -o -H newc) > initrd.img
t3=$(date +%s)
echo "TIMING kernel_fetch=$((t1-t0))s debootstrap=$((t2-t1))s pack=$((t3-t2))s total=$((t3-t0))s"
ls -la vmlinuz initrd.img
du -sh rootfs
