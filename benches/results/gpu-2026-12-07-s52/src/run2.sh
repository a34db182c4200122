#!/usr/bin/env bash
# GPU call 2 of 2026-12-07 (session 52, < 10 min): the device scan and exscan (new:
# scan_device & co, out of place and in place, blocking and nonblocking) through
# rw-gpucoll check without and with MPS (2 and 4 ranks), and through the MPI ABI
# (abi/tests/gpu/gpu_buffers.c, GPU_ABI_QUICK=1: the device tests of scripts/gpu-abi.sh,
# which start MPS for their second pass). Output: $OUT/summary.txt, $OUT/logs.tgz.
set -u
B=$PWD/.device-bin; O=${OUT:-/tmp/out}; mkdir -p $O/logs; S=$O/summary.txt
echo "build $(cat $B/REV)" > $S; nvidia-smi -L >> $S; t0=$SECONDS
run() { local n=$1 t=$2; shift 2; timeout -k 5 $t "$@" > $O/logs/$n.log 2>&1; echo "== $n rc=$? $((SECONDS-t0)) s" >> $S
  grep -E "rw-gpucoll check:|FAIL|failed|error|mismatch|differs" $O/logs/$n.log | tail -8 | cut -c1-260 >> $S; }
run coll_check_2 200 $B/rwrun -n 2 $B/rw-gpucoll check 16777216
RUN_TIMEOUT=120 GPU_ABI_QUICK=1 timeout -k 5 240 scripts/gpu-abi.sh $O/logs/abi > $O/logs/abi.out 2>&1
echo "== gpu-abi (quick) rc=$? $((SECONDS-t0)) s" >> $S; cut -c1-300 $O/logs/abi/summary.txt >> $S 2>/dev/null
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
run coll_check_2_mps 150 $B/rwrun -n 2 $B/rw-gpucoll check 16777216
run coll_check_4_mps 200 $B/rwrun -n 4 $B/rw-gpucoll check 4194304
mps_stop
tar czf $O/logs.tgz -C $O logs && rm -rf $O/logs
cat $S
