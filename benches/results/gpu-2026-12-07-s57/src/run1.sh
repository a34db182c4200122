#!/usr/bin/env bash
# GPU call 1 of session 57 (2026-12-07, < 9 min): the device paths after sessions 55-57
# (request table written in place, inlined eager paths, RequestSet: landed in a04970e;
# the exchange allreduce of 239caa5, which a 16-CPU machine running 2-4 ranks never
# takes), which no GPU run has covered. Checks: rw-gpucoll check at 2 ranks without MPS
# and at 2 and 4 ranks under MPS, peer under MPS, channels, stream p2p, gpu_buffers.c
# through the ABI (agreement on and off). Then before/after in one run: .device-bin =
# 239caa5, .device-bin/base = e5595dc (the last commit measured on a GPU, session 54),
# launches alternated, new first in round 1 and base first in round 2,
# allreduce -d cuda and latency -d cuda, no MPS and MPS.
set -u
B=$PWD/.device-bin; BB=$B/base; O=${OUT:-/tmp/out}; mkdir -p $O/logs; S=$O/summary.txt
echo "build $(cat $B/REV), base $(cat $BB/REV)" > $S; nvidia-smi -L >> $S; t0=$SECONDS
run() { local n=$1 t=$2; shift 2; timeout -k 5 $t "$@" > $O/logs/$n.log 2>&1; echo "== $n rc=$? $((SECONDS-t0)) s" >> $S
  grep -E "rw-gpucoll (check|peer):|gpu_buffers: ok|ping-pong|OK|FAIL|failed|differs" $O/logs/$n.log | tail -3 | cut -c1-220 >> $S; }
pass() { local s=$1 max=$2
  for i in 1 2; do
    order="new base"; [ $i = 2 ] && order="base new"
    for v in $order; do
      d=$B; [ $v = base ] && d=$BB
      run ar_${v}_$i$s 150 $d/rwrun -n 2 $d/rankwire-bench allreduce -d cuda --max-size $max -i 200 --warmup 10
      run lat_${v}_$i$s 100 $d/rwrun -n 2 $d/rankwire-bench latency -d cuda --max-size 1048576 -i 500 --warmup 20
    done
  done; }
run check_2 200 $B/rwrun -n 2 $B/rw-gpucoll check 4194304
export RANKWIRE_ABI_LIBDIR=$B/lib CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
abi/bin/mpicc -O2 abi/tests/gpu/gpu_buffers.c -I"$CUDA_HOME/include" -L"$CUDA_HOME/lib64" -lcudart -Wl,-rpath,"$CUDA_HOME/lib64" -o /tmp/gpu_buffers > $O/logs/build.log 2>&1
run gpu_buffers_2 60 $B/rwrun -n 2 /tmp/gpu_buffers
pass "" 67108864
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
run check_2_mps 150 $B/rwrun -n 2 $B/rw-gpucoll check 4194304
run check_4_mps 200 $B/rwrun -n 4 $B/rw-gpucoll check 4194304
run peer_2_mps 120 $B/rwrun -n 2 $B/rw-gpucoll peer 4194304
run ch2_mps 60 env RW_STREAM_ITERS=20,2000 $B/rwrun -n 2 $B/rw-gpuapp channels
run streamp2p_mps 120 $B/rwrun -n 2 $B/rw-gpuapp streamp2p
run gpu_buffers_2_mps_agree_off 60 env RANKWIRE_ABI_MEMORY_AGREEMENT=off $B/rwrun -n 2 /tmp/gpu_buffers
pass _mps 268435456
mps_stop
tar czf $O/logs.tgz -C $O logs && rm -rf $O/logs
cat $S
