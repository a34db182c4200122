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
  grep -vE "after [0-9]+ s:|stream-ordered [0-9]+ B ok" $O/logs/$n.log | tail -${TAILN:-14} >> $S
  pkill -9 -f rw-gpu 2>/dev/null; true; }
echo "build $(cat $B/REV)" > $S
nvcc -o /tmp/ec $B/exportcost.c -lcuda > $O/logs/nvcc.log 2>&1 && st exportcost 60 /tmp/ec
st sp 120 $B/rwrun -n 2 $B/rw-gpuapp streamp2p
st check_256k 120 $B/rwrun -n 2 $B/rw-gpuapp check 262144
mps_start; echo "mps: $? $MPS_WHY" >> $S
st sp_mps 60 $B/rwrun -n 2 $B/rw-gpuapp streamp2p
TAILN=6 st coll_peer_2_mps 200 $B/rwrun -n 2 $B/rw-gpucoll peer
mps_stop
tar czf $O/logs.tgz -C $O logs
