#!/usr/bin/env bash
set -u
export PATH=$PATH:/usr/local/cuda/bin
B=$PWD/.device-bin
O=${OUT:-/tmp/out}; mkdir -p $O/logs
S=$O/summary.txt
. scripts/mps.sh
st() { local n=$1 t=$2; shift 2; local t0=$SECONDS
  timeout -k 5 $t "$@" > $O/logs/$n.log 2>&1; local rc=$?
  echo "== $n rc=$rc $((SECONDS-t0)) s" >> $S
  grep -vE "after [0-9]+ s:" $O/logs/$n.log | tail -25 >> $S
  pkill -9 -f rw-gpuapp 2>/dev/null; true; }
which gdb eu-stack > $S 2>&1
# Backtraces of the stalled 2-round-trip ping-pong (no MPS)
( env RW_STREAM_ITERS=2 $B/rwrun -n 2 $B/rw-gpuapp-sym streamp2p > $O/logs/bt_run.log 2>&1 & )
sleep 14
for p in $(pgrep -x rw-gpuapp-sym | head -4); do
  echo "### pid $p $(tr '\0' ' ' < /proc/$p/cmdline)" >> $O/logs/bt.log
  if command -v gdb >/dev/null; then timeout 60 gdb -p $p -batch -ex "thread apply all bt 25" >> $O/logs/bt.log 2>&1
  else for t in /proc/$p/task/*; do echo "$t $(cat $t/comm) $(cat $t/wchan)" >> $O/logs/bt.log; done; fi
done
pkill -9 -f rw-gpuapp-sym; sleep 1
echo "== bt_run" >> $S; tail -5 $O/logs/bt_run.log >> $S
grep -E "^#|^Thread|###" $O/logs/bt.log | grep -vE "in (syscall|futex|clone|start_thread|std::sys)" | head -150 >> $S
st sp_noipc 40 env RANKWIRE_CUDA_IPC=0 RW_STREAM_ITERS=2,20,200 $B/rwrun -n 2 $B/rw-gpuapp streamp2p
st sp_pponly 40 env RW_STREAM_PP_ONLY=1 RW_STREAM_ITERS=2,20,200 $B/rwrun -n 2 $B/rw-gpuapp streamp2p
mps_start; echo "mps: $? $MPS_WHY" >> $S
st ipc2_ipc 120 python3 $B/ipc2.py ipc 128,256,384,512,768,1024
st ipc2_own 120 python3 $B/ipc2.py own 128,256,512,1024
st sp_noipc_mps 40 env RANKWIRE_CUDA_IPC=0 RW_STREAM_ITERS=2,20,200,2000 $B/rwrun -n 2 $B/rw-gpuapp streamp2p
st sp_pponly_mps 40 env RW_STREAM_PP_ONLY=1 RW_STREAM_ITERS=2,20,200,2000 $B/rwrun -n 2 $B/rw-gpuapp streamp2p
mps_stop
tar czf $O/logs.tgz -C $O logs
