#!/usr/bin/env bash
# GPU call 8 of 2026-12-07 (session 52, < 3 min), after the second review: Stream::id as
# an Option (bound device, kept once known), the in-place device reduce's device on
# non-root ranks. rw-gpucoll peer (stream-ordered forms, graph capture) and check at 2
# ranks under MPS; gpu_buffers.c at 2 ranks with the agreement off (MPS); channels.
set -u
B=$PWD/.device-bin; O=${OUT:-/tmp/out}; mkdir -p $O/logs; S=$O/summary.txt
echo "build $(cat $B/REV)" > $S; nvidia-smi -L >> $S; t0=$SECONDS
run() { local n=$1 t=$2; shift 2; timeout -k 5 $t "$@" > $O/logs/$n.log 2>&1; echo "== $n rc=$? $((SECONDS-t0)) s" >> $S
  grep -E "rw-gpucoll (check|peer):|gpu_buffers: ok|ping-pong|OK|FAIL|failed|differs" $O/logs/$n.log | tail -3 | cut -c1-220 >> $S; }
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
run peer_2_mps 120 $B/rwrun -n 2 $B/rw-gpucoll peer 4194304
run check_2_mps 150 $B/rwrun -n 2 $B/rw-gpucoll check 4194304
run ch2_mps 60 env RW_STREAM_ITERS=20,2000 $B/rwrun -n 2 $B/rw-gpuapp channels
run streamp2p_mps 120 $B/rwrun -n 2 $B/rw-gpuapp streamp2p
export RANKWIRE_ABI_LIBDIR=$B/lib CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
abi/bin/mpicc -O2 abi/tests/gpu/gpu_buffers.c -I"$CUDA_HOME/include" -L"$CUDA_HOME/lib64" -lcudart -Wl,-rpath,"$CUDA_HOME/lib64" -o /tmp/gpu_buffers > $O/logs/build.log 2>&1
run gpu_buffers_2_mps_agree_off 60 env RANKWIRE_ABI_MEMORY_AGREEMENT=off $B/rwrun -n 2 /tmp/gpu_buffers
mps_stop
tar czf $O/logs.tgz -C $O logs && rm -rf $O/logs
cat $S
