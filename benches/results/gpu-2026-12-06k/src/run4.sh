#!/usr/bin/env bash
# Run 4 of stop 46: device channels whose host route (above one scratch slot, or no
# peer-memory path) synchronizes the stream and runs blocking device calls instead of
# the stream proxy. Ring in blocking order (RW_CH_SERIAL=1: one stream, even ranks
# send first) at 8 B, 64 KiB (kernel route under MPS) and 8 MiB (host route), then the
# 8-byte ping-pong; under MPS at 2 ranks, and without MPS (every pair on the host
# route) at 2 and 4 ranks. First the default test at 4 ranks under MPS (kernel route,
# grids now sized for every pair kernel of the node).
set -u
B=$PWD/.device-bin
O=${OUT:-/tmp/out}; mkdir -p $O
S=$O/summary.txt; echo "build $(cat $B/REV)" > $S; nvidia-smi -L >> $S
t0=$SECONDS
step() { local n=$1 t=$2; shift 2
  timeout -k 5 $t "$@" > $O/$n.log 2>&1; echo "== $n rc=$? $((SECONDS-t0)) s" >> $S
  grep -E "one way|set up|mismatch|FAILED|ring|WARN" $O/$n.log | cut -c1-300 | head -24 >> $S; }
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
step ch4_mps 90 env RW_STREAM_ITERS=20,2000 $B/rwrun -n 4 $B/rw-gpuapp channels
step ch2_mps_serial 90 env RW_CH_SERIAL=1 RW_CH_SIZES=8,65536,8388608 RW_STREAM_ITERS=20,2000 $B/rwrun -n 2 $B/rw-gpuapp channels
mps_stop
step ch2_nomps_serial 120 env RW_CH_SERIAL=1 RW_CH_SIZES=8,65536,8388608 RW_STREAM_ITERS=20,200 $B/rwrun -n 2 $B/rw-gpuapp channels
step ch4_nomps_serial 120 env RW_CH_SERIAL=1 RW_CH_SIZES=8,65536 RW_STREAM_ITERS=20 $B/rwrun -n 4 $B/rw-gpuapp channels
tar czf $O/logs.tgz -C $O $(cd $O && ls *.log); rm -f $O/*.log
