#!/bin/sh
# guest-rdma.sh — runs INSIDE the Soft-RoCE guest (started by run-vm.sh from ci-softroce.sh).
# Sets up one rxe device on a veth pair, then runs the RDMA test binaries that
# ci-softroce.sh built on the host and put in the share (/mnt/host/bin, laid out like
# target/debug so the tests find rwrun and rw-rdmaapp next to deps/). Every rank of the
# multi-process tests uses the same rxe device (loopback to its own address): two rxe
# devices in one network namespace do not work on this kernel.
# Prints "RDMA-SUITE <name> rc=<code>" per suite; the host decides pass/fail from those.
# $1: "single" (default: one VM, every suite), or "server" / "client" (two VMs joined by
# a QEMU socket link on eth0: only the two-node test, rdma_two_node).
S=/mnt/host
MODE=${1:-single}
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
modprobe crc32_generic; modprobe rdma_rxe; modprobe ib_uverbs; modprobe veth
if [ "$MODE" = server ] || [ "$MODE" = client ]; then
  modprobe virtio_net
  sleep 1
  if [ "$MODE" = server ]; then me=1; else me=2; fi
  ip addr add 10.77.1.$me/24 dev eth0
  ip link set eth0 up
  NETDEV=eth0
  export RANKWIRE_RDMA_TWO_NODE=$MODE RANKWIRE_RDMA_PEER=10.77.1.1:47800
  sleep 2
else
  ip link add veth0 type veth peer name veth1
  ip addr add 10.77.0.1/24 dev veth0
  ip link set veth0 up; ip link set veth1 up
  NETDEV=veth0
fi
if ! rdma link add rxe0 type rxe netdev $NETDEV; then
  echo "RDMA-SUITE setup rc=1 (rdma link add failed)"
  exit 1
fi
rdma link show
for i in 0 1; do
  echo "rxe0 gid[$i] = $(cat /sys/class/infiniband/rxe0/ports/1/gids/$i) $(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$i 2>/dev/null)"
done
ulimit -l unlimited
# Run from RAM, not from 9p.
cp -r "$S/bin" /tmp/bin
export RANKWIRE_TEST_REQUIRE_RDMA=1 RUST_BACKTRACE=1
for t in /tmp/bin/deps/*; do
  name=$(basename "$t")
  case "$MODE:$name" in
    single:*|server:rdma_two_node-*|client:rdma_two_node-*) ;;
    *) continue ;;
  esac
  echo "=== $name"
  start=$(cut -d' ' -f1 /proc/uptime)
  # shellcheck disable=SC2046 # libtest arguments from the host, split on spaces
  timeout 900 "$t" --test-threads=1 --nocapture $(cat "$S/test-args" 2>/dev/null)
  rc=$?
  echo "RDMA-SUITE $name rc=$rc (started at ${start}s, ended at $(cut -d' ' -f1 /proc/uptime)s uptime)"
done
# An rwrun job across both VMs with ssh as the launch agent (tests/rdma.rs, `two_vm_`):
# the server VM runs it; the client VM serves ssh until the server says it is done.
if [ "$MODE" = server ] || [ "$MODE" = client ]; then
  mkdir -p /run/sshd
  /usr/sbin/sshd -E /tmp/sshd.log || echo "sshd failed to start: $(cat /tmp/sshd.log)"
fi
DONE=$S/two-vm-done
if [ "$MODE" = server ]; then
  rm -f "$DONE"
  for t in /tmp/bin/deps/rdma-*; do
    echo "=== $(basename "$t") two_vm"
    start=$(cut -d' ' -f1 /proc/uptime)
    (cd /tmp/bin && TWO_VM_REMOTE=10.77.1.2 TWO_VM_LOCAL=10.77.1.1 \
      timeout 1200 "$t" --test-threads=1 --nocapture two_vm_)
    rc=$?
    echo "RDMA-SUITE two_vm_job rc=$rc (started at ${start}s, ended at $(cut -d' ' -f1 /proc/uptime)s uptime)"
  done
  touch "$DONE"
elif [ "$MODE" = client ]; then
  i=0
  while [ ! -e "$DONE" ] && [ $i -lt 1500 ]; do sleep 1; i=$((i + 1)); done
  echo "client: the server's two-VM job ended after ${i}s of waiting; rankwire processes left here:"
  pgrep -a -f 'rw-|heat2d' || echo "none"
fi
