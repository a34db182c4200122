#!/usr/bin/env bash
# Run 5 of stop 46: the last commit (send and receive share one route function) on the
# GPU: the default channels test at 2 ranks under MPS, and blocking order without MPS.
set -u
B=$PWD/.device-bin
O=${OUT:-/tmp/out}; mkdir -p $O
S=$O/summary.txt; echo "build $(cat $B/REV)" > $S; nvidia-smi -L >> $S
step() { local n=$1 t=$2; shift 2
  timeout -k 5 $t "$@" > $O/$n.log 2>&1; echo "== $n rc=$?" >> $S
  grep -E "one way|mismatch|FAILED|ring" $O/$n.log | cut -c1-160 | head -20 >> $S; }
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
step ch2_mps 60 env RW_STREAM_ITERS=2000,20000 $B/rwrun -n 2 $B/rw-gpuapp channels
mps_stop
step ch2_nomps_serial 60 env RW_CH_SERIAL=1 RW_CH_SIZES=8,8388608 RW_STREAM_ITERS=20 $B/rwrun -n 2 $B/rw-gpuapp channels
rm -f $O/*.log
