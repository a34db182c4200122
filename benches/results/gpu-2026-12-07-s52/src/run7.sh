#!/usr/bin/env bash
# GPU call 7 of 2026-12-07 (session 52, < 5 min), after the review fixes: the device tests
# of the ABI (scripts/gpu-abi.sh with GPU_ABI_QUICK=1: gpu_buffers.c now with MPI_Exscan
# with rank 0's buffer NULL and four nonblocking MPI_IN_PLACE calls in flight, also with
# the memory-kind agreement off so that they take the device collectives), then
# rw-gpucoll check at 2 ranks under MPS (the in-place error names changed).
set -u
B=$PWD/.device-bin; O=${OUT:-/tmp/out}; mkdir -p $O/logs; S=$O/summary.txt
echo "build $(cat $B/REV)" > $S; nvidia-smi -L >> $S; t0=$SECONDS
RUN_TIMEOUT=120 GPU_ABI_QUICK=1 timeout -k 5 300 scripts/gpu-abi.sh $O/logs/abi > $O/logs/abi.out 2>&1
echo "== gpu-abi (quick) rc=$? $((SECONDS-t0)) s" >> $S; cut -c1-300 $O/logs/abi/summary.txt >> $S 2>/dev/null
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
timeout -k 5 150 $B/rwrun -n 2 $B/rw-gpucoll check 4194304 > $O/logs/coll_check_2_mps.log 2>&1
echo "== coll_check_2_mps rc=$? $((SECONDS-t0)) s" >> $S; grep "rw-gpucoll check:" $O/logs/coll_check_2_mps.log | cut -c1-200 >> $S
mps_stop
tar czf $O/logs.tgz -C $O logs && rm -rf $O/logs
cat $S
