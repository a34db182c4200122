#!/usr/bin/env bash
# GPU call D of 2026-12-10 (the device time left after failed starts: < 4 min): under
# MPS, issue 18's device channels (8-byte ping-pong, ring between user kernels) at 2
# ranks; rw-gpucoll peer at 2 ranks (stream-ordered broadcasts on a cudarc stream through
# Stream::from_cudarc, new in 0de1658); then OSU 7.2 built with --enable-cuda against our
# ABI with validation (-c) in the time left. Output: $OUT/summary.txt, $OUT/logs.tgz.
set -u
B=$PWD/.device-bin; O=${OUT:-/tmp/out}; mkdir -p $O/logs; S=$O/summary.txt
echo "build $(cat $B/REV)" > $S; nvidia-smi -L >> $S; t0=$SECONDS
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
run() { local n=$1 t=$2; shift 2; timeout -k 5 $t "$@" > $O/logs/$n.log 2>&1; echo "== $n rc=$? $((SECONDS-t0)) s" >> $S
  grep -E "ping|one way|round trip|checks|FAIL|error|mismatch|differs" $O/logs/$n.log | tail -8 | cut -c1-220 >> $S; }
run ch2_mps 40 env RW_STREAM_ITERS=20,2000 $B/rwrun -n 2 $B/rw-gpuapp channels
run peer2_mps 60 $B/rwrun -n 2 $B/rw-gpucoll peer 4194304
OSU_TARBALL=$B/osu-micro-benchmarks-7.2.tar.gz MPICC=$PWD/abi/bin/mpicc MPICXX=$PWD/abi/bin/mpicxx \
  MPIEXEC="$B/rwrun" ABI_LIBDIR="$B/lib" RANKWIRE_ABI_LIBDIR="$B/lib" OSU_NP=2 OSU_ALLOW_FAIL=1 \
  OSU_ONLY='osu_latency$|osu_bw$|osu_allreduce$|osu_bcast$' \
  OSU_ARGS='-m 1:4194304 -i 100 -x 10' PATH=/usr/local/cuda/bin:$PATH CUDA_HOME=/usr/local/cuda \
  timeout $((185 - (SECONDS - t0))) scripts/osu.sh --cuda > $O/logs/osu_cuda.log 2>&1
echo "== osu --cuda rc=$? $((SECONDS-t0)) s" >> $S
cp target/osu/summary.txt $O/logs/osu_cuda_summary.txt 2>/dev/null && cat target/osu/summary.txt >> $S
cp -r target/osu/logs $O/logs/osu_cuda_logs 2>/dev/null
mps_stop
tar czf $O/logs.tgz -C $O logs && rm -rf $O/logs
cat $S
