#!/bin/bash
# ci-softroce.sh — the RDMA part of CI: build a Debian 12 guest with Soft-RoCE (rdma_rxe),
# boot it under QEMU (TCG; KVM when the host has real hardware KVM), and run rankwire's RDMA
# tests inside it: transports/tests/rdma_loopback.rs (two transports over one rxe device:
# eager with credits, RDMA READ/WRITE, bad rkey, registration cache, GID settings) and
# tests/rdma.rs (rwrun jobs of 2 and 3 ranks over RDMA: every size class eager and
# rendezvous, buffer reuse, leave-pinned cache hits, wrong GID index errors), then
# transports/tests/rdma_two_node.rs across two VMs joined by a QEMU socket link (eager
# frames both ways, RDMA READ and WRITE over a real, if virtual, wire).
# The test binaries are built here on the host and run unchanged in the guest (same glibc).
#
# Needs root (debootstrap), a Debian mirror, and ~1.5 GB in $WORK. Exit status 0 only if
# every suite in the guest exited 0 and none is missing. Nothing is left running: QEMU runs
# in the foreground under a timeout.
# env: WORK (default /tmp/rankwire-softroce), VM_TIMEOUT (default 1800 s), FRESH=1 rebuilds
#      the guest image, SOFTROCE_ONE_VM=0 / SOFTROCE_TWO_VM=0 skip a stage,
#      SOFTROCE_TEST_ARGS="NAME --exact" passes libtest arguments (a filter) to every suite
#      in the guest (a developer's partial run).
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=scripts/softroce
WORK=${WORK:-/tmp/rankwire-softroce}; export WORK
SHARE=$WORK/share
t0=$(date +%s)

if ! command -v qemu-system-x86_64 >/dev/null || ! command -v debootstrap >/dev/null \
   || ! command -v cpio >/dev/null || ! command -v depmod >/dev/null; then
  # qemu-utils is not needed (no disk image).
  apt-get update -qq
  timeout 900 env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    qemu-system-x86 debootstrap cpio kmod >/dev/null
fi
t1=$(date +%s); echo "ci-softroce: TIMING host-packages=$((t1-t0))s"

if [ ! -f "$WORK/initrd.img" ] || [ ! -f "$WORK/vmlinuz" ] || [ ! -x "$WORK/rootfs/usr/sbin/sshd" ] \
   || [ "${FRESH:-0}" = 1 ]; then
  # build-rootfs.sh asks apt which kernel package is current: needs fresh package lists.
  apt-get update -qq
  timeout 1500 "$HERE/build-rootfs.sh"
fi
t2=$(date +%s); echo "ci-softroce: TIMING guest-image=$((t2-t1))s"

# Host-built test binaries (debug, like scripts/test.sh).
cargo build --workspace --bins
# Whole-workspace feature resolution, as scripts/test.sh builds: reuses its artifacts.
exes=$( cargo test --workspace --no-run --message-format=json \
        | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] in ("rdma", "rdma_loopback", "rdma_two_node"):
        print(m["executable"])
')
[ "$(echo "$exes" | wc -l)" -eq 3 ] || { echo "ci-softroce: expected 3 test executables, got: $exes" >&2; exit 1; }
rm -rf "$SHARE"; mkdir -p "$SHARE/bin/deps"
cp target/debug/rwrun target/debug/rw-rdmaapp target/debug/rw-faultapp target/debug/rw-testapp "$SHARE/bin/"
cargo build -p rankwire-examples --example heat2d
mkdir -p "$SHARE/bin/examples"; cp target/debug/examples/heat2d "$SHARE/bin/examples/"
for e in $exes; do cp "$e" "$SHARE/bin/deps/"; done
cp "$HERE/guest-rdma.sh" "$SHARE/"
printf '%s\n' "${SOFTROCE_TEST_ARGS:-}" > "$SHARE/test-args"
t3=$(date +%s); echo "ci-softroce: TIMING build=$((t3-t2))s"

fail=0
t4=$t3
if [ "${SOFTROCE_ONE_VM:-1}" != 0 ]; then
VM_TIMEOUT=${VM_TIMEOUT:-1800} MEM=${MEM:-3G} "$HERE/run-vm.sh" rw1 guest-rdma.sh single || true
t4=$(date +%s); echo "ci-softroce: TIMING vm=$((t4-t3))s"
LOG=$SHARE/rw1.console.log
echo "---- guest console (tail)"; tail -n 80 "$LOG" || true
for e in $exes; do
  n=$(basename "$e")
  if grep -q "RDMA-SUITE $n rc=0" "$LOG"; then
    echo "ci-softroce: $n passed in the guest"
  else
    echo "ci-softroce: $n FAILED or did not finish in the guest" >&2; fail=1
    # The suite's own output, which the console's tail above may have cut off (the
    # guest runs it with --nocapture, so a failing test's output is inline): its last
    # 150 lines.
    echo "---- $n: the suite's output (last 150 lines)"
    awk -v s="=== $n" -v e="RDMA-SUITE $n " 'index($0, s) == 1 {on = 1; next}
      on && (index($0, e) == 1 || /^=== /) {exit}
      on {print}' "$LOG" | tail -n 150 || true
  fi
done
grep -E "^test result|RDMA-SUITE" "$LOG" || true
fi

# Two VMs, one NIC each, wired together through a QEMU socket on 127.0.0.1 (nothing leaves
# this machine). The server VM listens; the client VM connects.
if [ "${SOFTROCE_TWO_VM:-1}" != 0 ]; then
  port=$((40000 + $$ % 20000))
  SMP=1 VM_TIMEOUT=${VM_TIMEOUT:-1800} MEM=2G "$HERE/run-vm.sh" rw-srv guest-rdma.sh server "listen:$port" & spid=$!
  sleep 3
  SMP=1 VM_TIMEOUT=${VM_TIMEOUT:-1800} MEM=2G "$HERE/run-vm.sh" rw-cli guest-rdma.sh client "connect:$port" & cpid=$!
  wait $cpid || true; wait $spid || true
  t5=$(date +%s); echo "ci-softroce: TIMING two-vm=$((t5-t4))s"
  for vm in rw-srv rw-cli; do
    L=$SHARE/$vm.console.log
    echo "---- $vm console (tail)"; tail -n 30 "$L" || true
    if grep -q "RDMA-SUITE rdma_two_node-[0-9a-f]* rc=0" "$L"; then
      echo "ci-softroce: two-node test passed on $vm"
    else
      echo "ci-softroce: two-node test FAILED or did not finish on $vm" >&2; fail=1
    fi
  done
  # The rwrun job across both VMs (ssh as the launch agent), run from the server VM.
  if grep -q "RDMA-SUITE two_vm_job rc=0" "$SHARE/rw-srv.console.log"; then
    echo "ci-softroce: two-VM rwrun job passed"
  else
    echo "ci-softroce: two-VM rwrun job FAILED or did not finish" >&2; fail=1
  fi
fi
echo "ci-softroce: TIMING total=$(( $(date +%s)-t0 ))s fail=$fail"
exit $fail
