#!/usr/bin/env bash
# Run 2 of stop 46 (after run.sh: the ring's proxy-route size hung, so the ping-pong and
# the mismatch check never ran): rw-gpuapp channels with the ring on the kernel route
# (8 B - 4 MiB, two streams), the 8-byte ping-pong and the size mismatch, at 2 and 4
# ranks under MPS; streamp2p's ping-pong and the blocking latency in the same run for
# the ratios; then the proxy route (8 MiB under MPS; 8 B - 64 KiB without MPS) with
# sends and receives in blocking order on one stream (RW_CH_SERIAL=1), and once with
# two streams and RANKWIRE_LOG=debug (expected to hang: diagnosis).
set -u
export PATH=$PATH:/usr/local/cuda/bin
B=$PWD/.device-bin
O=${OUT:-/tmp/out}; mkdir -p $O
S=$O/summary.txt
echo "build $(cat $B/REV)" > $S; nvidia-smi -L >> $S
t0=$SECONDS
step() { # name timeout cmd...
  local n=$1 t=$2; shift 2
  timeout -k 5 $t "$@" > $O/$n.log 2>&1; local rc=$?
  echo "== $n rc=$rc $((SECONDS-t0)) s" >> $S
  grep -E "one way|set up|mismatch|FAILED|ring" $O/$n.log | head -24 >> $S
}
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
step ch2_mps 90 env RW_STREAM_ITERS=20,200,2000,20000 $B/rwrun -n 2 $B/rw-gpuapp channels
step sp2_mps 60 env RW_STREAM_PP_ONLY=1 RW_STREAM_ITERS=20,200,2000 $B/rwrun -n 2 $B/rw-gpuapp streamp2p
step lat_mps 60 $B/rwrun -n 2 $B/rankwire-bench latency -d cuda --min-size 1 --max-size 64 -i 2000
tail -8 $O/lat_mps.log >> $S
step ch2b_mps 90 env RW_STREAM_ITERS=2000,20000 $B/rwrun -n 2 $B/rw-gpuapp channels
step ch4_mps 90 env RW_STREAM_ITERS=20,2000 $B/rwrun -n 4 $B/rw-gpuapp channels
step chproxy_serial_mps 60 env RW_CH_SIZES=8388608 RW_CH_SERIAL=1 RW_STREAM_ITERS=20 $B/rwrun -n 2 $B/rw-gpuapp channels
step chproxy_2s_mps 30 env RANKWIRE_LOG=debug RW_CH_SIZES=8388608 RW_STREAM_ITERS=20 $B/rwrun -n 2 $B/rw-gpuapp channels
mps_stop
step ch2_nomps_serial 90 env RW_CH_SERIAL=1 RW_CH_SIZES=8,65536 RW_STREAM_ITERS=20,200 $B/rwrun -n 2 $B/rw-gpuapp channels
echo "== total $((SECONDS-t0)) s" >> $S
tail -c 20000 $O/chproxy_2s_mps.log > $O/chproxy_2s_tail.txt
rm -f $O/chproxy_2s_mps.log
tar czf $O/logs.tgz -C $O $(cd $O && ls *.log *.txt | grep -v summary) 2>/dev/null
rm -f $O/*.log $O/chproxy_2s_tail.txt
