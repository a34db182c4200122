#!/usr/bin/env bash
# GPU call 5 of 2026-12-07 (session 52, < 10 min): the new forms through forced paths.
# rw-gpucoll check with the peer-memory path off (host schedules on device buffers, MPS),
# with a forced host allreduce algorithm (ring; also turns the staged path off, MPS), and
# with the peer path forced on without MPS (time-sliced: slow, must be correct; small
# sizes); rw-gpucoll peer forced on without MPS; rw-gpuapp check (device point-to-point,
# MPS); the device channels without MPS in blocking order (RW_CH_SERIAL=1: the host
# route). Output: $OUT/summary.txt, $OUT/logs.tgz.
set -u
B=$PWD/.device-bin; O=${OUT:-/tmp/out}; mkdir -p $O/logs; S=$O/summary.txt
echo "build $(cat $B/REV)" > $S; nvidia-smi -L >> $S; t0=$SECONDS
run() { local n=$1 t=$2; shift 2; timeout -k 5 $t "$@" > $O/logs/$n.log 2>&1; echo "== $n rc=$? $((SECONDS-t0)) s" >> $S
  grep -E "rw-gpucoll (check|peer):|checks|ping-pong|FAIL|failed|error|mismatch|differs" $O/logs/$n.log | tail -4 | cut -c1-240 >> $S; }
run peer_forced_2 150 env RANKWIRE_GPU_PEER=on RANKWIRE_GPU_PEER_TIMEOUT=60 $B/rwrun -n 2 $B/rw-gpucoll peer 4099
run ch2_serial 60 env RW_CH_SERIAL=1 RW_CH_SIZES=8,65536 RW_STREAM_ITERS=20,200 $B/rwrun -n 2 $B/rw-gpuapp channels
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
run check_nopeer_2_mps 150 env RANKWIRE_GPU_PEER=off $B/rwrun -n 2 $B/rw-gpucoll check 4194304
run check_ring_3_mps 150 env RANKWIRE_ALLREDUCE_ALGO=ring $B/rwrun -n 3 $B/rw-gpucoll check 4194304
run gpuapp_check_2_mps 150 $B/rwrun -n 2 $B/rw-gpuapp check 4194304
run check_3_mps 150 $B/rwrun -n 3 $B/rw-gpucoll check 4194304
mps_stop
run check_peer_on_2 200 env RANKWIRE_GPU_PEER=on RANKWIRE_GPU_PEER_TIMEOUT=60 $B/rwrun -n 2 $B/rw-gpucoll check 4099
tar czf $O/logs.tgz -C $O logs && rm -rf $O/logs
cat $S
