#!/usr/bin/env bash
# GPU call 3 of 2026-12-07 (session 52, < 10 min): the nonblocking in-place device forms
# (new: iallreduce/ireduce/iallgather/ireduce_scatter_block_device_in_place; the blocking
# in-place allreduce, reduce and allgather now run the schedules in place, without a
# copy) and the device scans, through rw-gpucoll check (without MPS at 2 ranks, with MPS
# at 2 and 4) and rw-gpucoll peer (the blocking in-place and stream-ordered forms);
# gpu_buffers.c through the ABI; then issue 18's allreduce table under MPS (2 and 4
# ranks, to 256 MiB) and the host-staged path of the same run. Output: $OUT/summary.txt,
# $OUT/logs.tgz.
set -u
B=$PWD/.device-bin; O=${OUT:-/tmp/out}; mkdir -p $O/logs; S=$O/summary.txt
echo "build $(cat $B/REV)" > $S; nvidia-smi -L >> $S; t0=$SECONDS
run() { local n=$1 t=$2; shift 2; timeout -k 5 $t "$@" > $O/logs/$n.log 2>&1; echo "== $n rc=$? $((SECONDS-t0)) s" >> $S
  grep -E "rw-gpucoll (check|peer):|checks|FAIL|failed|error|mismatch|differs" $O/logs/$n.log | tail -6 | cut -c1-260 >> $S; }
bench() { local n=$1; shift; run "$n" 200 "$@"; grep -E "^(8|1048576|67108864|268435456) " $O/logs/$n.log >> $S; grep -i "bound" $O/logs/$n.log | head -2 >> $S; }
run coll_check_2 200 $B/rwrun -n 2 $B/rw-gpucoll check 16777216
RUN_TIMEOUT=120 GPU_ABI_QUICK=1 timeout -k 5 200 scripts/gpu-abi.sh $O/logs/abi > $O/logs/abi.out 2>&1
echo "== gpu-abi (quick) rc=$? $((SECONDS-t0)) s" >> $S; grep -E "gpu_buffers|rc=[1-9]" $O/logs/abi/summary.txt | cut -c1-300 >> $S 2>/dev/null
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
run coll_check_2_mps 150 $B/rwrun -n 2 $B/rw-gpucoll check 16777216
run coll_check_4_mps 200 $B/rwrun -n 4 $B/rw-gpucoll check 4194304
run coll_peer_2_mps 120 $B/rwrun -n 2 $B/rw-gpucoll peer 4194304
bench coll_bench_2_mps $B/rwrun -n 2 $B/rankwire-bench allreduce -d cuda --max-size 268435456 -i 1000 --warmup 20
bench coll_bench_4_mps $B/rwrun -n 4 $B/rankwire-bench allreduce -d cuda --max-size 268435456 -i 1000 --warmup 20
bench coll_bench_nopeer_2_mps env RANKWIRE_GPU_PEER=off $B/rwrun -n 2 $B/rankwire-bench allreduce -d cuda --max-size 268435456 -i 1000 --warmup 20
mps_stop
tar czf $O/logs.tgz -C $O logs && rm -rf $O/logs
cat $S
