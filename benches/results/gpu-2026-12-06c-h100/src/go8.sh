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
  tail -30 $O/logs/$n.log >> $S
  pkill -9 -f rw-gpu 2>/dev/null; pkill -9 -f /tmp/bp 2>/dev/null; true; }
nvcc -o /tmp/bp $B/blockprobe.c -lcuda -lpthread > $O/logs/nvcc.log 2>&1 || { echo "nvcc failed" >> $S; cat $O/logs/nvcc.log >> $S; }
st probe 120 /tmp/bp
mps_start; echo "mps: $? $MPS_WHY" >> $S
st probe_mps 120 /tmp/bp
for sz in 268435456 536870912 1073741824; do
  st lat_$sz 150 $B/rwrun -n 2 $B/rw-gpucoll latency $sz
done
mps_stop
tar czf $O/logs.tgz -C $O logs
