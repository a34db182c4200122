#!/usr/bin/env bash
# GPU call 6 of 2026-12-07 (session 52, < 3 min): Stream::id (cuStreamGetId) now tells
# streams apart in the peer group's ordering and the stream proxy: the stream-ordered
# forms under MPS (rw-gpucoll peer at 2 and 4 ranks, rw-gpuapp channels and streamp2p,
# rw-gpuapp cudarc). Output: $OUT/summary.txt, $OUT/logs.tgz.
set -u
B=$PWD/.device-bin; O=${OUT:-/tmp/out}; mkdir -p $O/logs; S=$O/summary.txt
echo "build $(cat $B/REV)" > $S; nvidia-smi -L >> $S; t0=$SECONDS
run() { local n=$1 t=$2; shift 2; timeout -k 5 $t "$@" > $O/logs/$n.log 2>&1; echo "== $n rc=$? $((SECONDS-t0)) s" >> $S
  grep -E "rw-gpucoll (check|peer):|checks|ping-pong|OK|FAIL|failed|error|differs" $O/logs/$n.log | tail -4 | cut -c1-240 >> $S; }
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
run peer_2_mps 120 $B/rwrun -n 2 $B/rw-gpucoll peer 4194304
run peer_4_mps 150 $B/rwrun -n 4 $B/rw-gpucoll peer 4194304
run ch2_mps 60 env RW_STREAM_ITERS=20,2000 $B/rwrun -n 2 $B/rw-gpuapp channels
run streamp2p_mps 120 $B/rwrun -n 2 $B/rw-gpuapp streamp2p
run cudarc_mps 120 $B/rwrun -n 2 $B/rw-gpuapp cudarc
mps_stop
tar czf $O/logs.tgz -C $O logs && rm -rf $O/logs
cat $S
