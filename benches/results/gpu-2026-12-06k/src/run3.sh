#!/usr/bin/env bash
# Run 3 of stop 46 (diagnosis): the two proxy-route hangs of run 2 with every thread's
# stack dumped after 20 s (gdb where present, else /proc/PID/task/*/stack and wchan).
#  a. MPS, 8 MiB, two streams per rank (send and receive posted at once both ways);
#  b. no MPS, 8 B, one stream in blocking order (rank 0 hung in round 1's send).
set -u
B=$PWD/.device-bin
O=${OUT:-/tmp/out}; mkdir -p $O
S=$O/summary.txt; echo "build $(cat $B/REV)" > $S; nvidia-smi -L >> $S
command -v gdb >> $S || echo "no gdb" >> $S
dump() { # label
  for p in $(pgrep -f "rw-gpuapp-sym channels"); do
    echo "=== $1 pid $p $(tr '\0' ' ' < /proc/$p/cmdline)" >> $O/stacks.txt
    if command -v gdb >/dev/null; then
      timeout 60 gdb -batch -p $p -ex "thread apply all bt 25" >> $O/stacks.txt 2>&1
    else
      for t in /proc/$p/task/*; do echo "-- $t $(cat $t/comm) wchan=$(cat $t/wchan)"; cat $t/stack 2>/dev/null; done >> $O/stacks.txt
    fi
  done
}
run() { # label timeout env...
  local l=$1 t=$2; shift 2
  ( env "$@" timeout -k 5 $t $B/rwrun -n 2 $B/rw-gpuapp-sym channels > $O/$l.log 2>&1; echo "== $l rc=$?" >> $S ) &
  sleep 22; dump $l; wait
}
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
run a_mps_2s 45 RW_CH_SIZES=8388608 RW_STREAM_ITERS=20
mps_stop
run b_nomps_serial 45 RW_CH_SERIAL=1 RW_CH_SIZES=8,65536 RW_STREAM_ITERS=20
grep -c . $O/stacks.txt >> $S
