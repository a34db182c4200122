#!/bin/bash
# run-vm.sh — boot the Soft-RoCE guest built by build-rootfs.sh and run one script from the shared folder.
#
# usage: run-vm.sh NAME SCRIPT [ARG] [NET]
#   NAME    guest hostname and log name ($SHARE/NAME.console.log is the serial console)
#   SCRIPT  path of the script to run, relative to $SHARE (the share is /mnt/host in the guest)
#   ARG     one word passed to the script as $1 (e.g. "single", "server", "client")
#   NET     "none" (default): no NIC; "listen:PORT" / "connect:PORT": one virtio-net NIC whose wire is a
#           QEMU TCP socket on 127.0.0.1:PORT, i.e. a private point-to-point ethernet between two guests
#           (nothing leaves this machine; no host tap/bridge needed).
# env: WORK (default /tmp/rankwire-softroce), SHARE (default $WORK/share), MEM (default 2G), SMP (default 2),
#      ACCEL (kvm|tcg|auto, see below),
#      VM_TIMEOUT (default 600 s wall clock, then QEMU is killed).
# QEMU runs in the foreground; run it with & and keep $! if you want it in the background.
set -euo pipefail
WORK=${WORK:-/tmp/rankwire-softroce}
SHARE=${SHARE:-$WORK/share}
NAME=$1; SCRIPT=$2; ARG=${3:-none}; NET=${4:-none}
MEM=${MEM:-2G}; SMP=${SMP:-2}; VM_TIMEOUT=${VM_TIMEOUT:-600}

case "$NET" in
  none)      NETOPTS=(-nic none) ;;
  listen:*)  NETOPTS=(-netdev "socket,id=n0,listen=127.0.0.1:${NET#listen:}"
                      -device "virtio-net-pci,netdev=n0,mac=52:54:00:77:00:01") ;;
  connect:*) NETOPTS=(-netdev "socket,id=n0,connect=127.0.0.1:${NET#connect:}"
                      -device "virtio-net-pci,netdev=n0,mac=52:54:00:77:00:02") ;;
  *) echo "bad NET $NET" >&2; exit 2 ;;
esac

# Accelerator. ACCEL=kvm|tcg|auto (default auto).
# auto picks TCG (pure emulation) when /dev/kvm is missing OR when the host's KVM is "kvm_pvm"
# (PVM: software nested virtualization used by some cloud sandboxes, e.g. Firecracker with
# nested_pvm=1). PVM only runs PVM-enabled guest kernels: a stock Debian kernel hangs right after
# "Probing EDD ... ok" (decompressor), with 0 s of vCPU time. TCG boots it fine, just slower.
ACCEL=${ACCEL:-auto}
if [ "$ACCEL" = auto ]; then
  if [ -w /dev/kvm ] && [ ! -d /sys/module/kvm_pvm ]; then ACCEL=kvm; else ACCEL=tcg; fi
fi
case "$ACCEL" in
  kvm) KVM=(-enable-kvm -cpu host) ;;
  tcg) KVM=(-accel tcg,thread=multi -cpu max) ;;
  *) echo "bad ACCEL $ACCEL" >&2; exit 2 ;;
esac
echo "run-vm: $NAME accel=$ACCEL net=$NET script=$SCRIPT arg=$ARG" >&2

exec timeout --kill-after=10 "$VM_TIMEOUT" qemu-system-x86_64 "${KVM[@]}" -m "$MEM" -smp "$SMP" \
  -kernel "$WORK/vmlinuz" -initrd "$WORK/initrd.img" \
  -append "console=ttyS0 quiet loglevel=4 panic=-1 rdinit=/init softroce_host=$NAME softroce.run=$SCRIPT softroce.arg=$ARG" \
  -virtfs "local,path=$SHARE,mount_tag=host0,security_model=none,id=host0" \
  "${NETOPTS[@]}" \
  -display none -monitor none -serial "file:$SHARE/$NAME.console.log" -no-reboot </dev/null
