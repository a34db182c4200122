#!/usr/bin/env bash
# GPU call 1 of 2026-12-07 (session 52) (one device call, < 10 min): issue 18's device channels
# (stream-ordered send/recv between user kernels; 8-byte ping-pong) under MPS at 2 and
# 4 ranks, first; then the whole of scripts/gpu-run.sh (without MPS, then with MPS)
# in what time is left. Output: $OUT/summary.txt, $OUT/logs.tgz.
set -u
B=$PWD/.device-bin; O=${OUT:-/tmp/out}; mkdir -p $O/logs $O/gpu-run; S=$O/summary.txt
echo "build $(cat $B/REV)" > $S; nvidia-smi -L >> $S; t0=$SECONDS
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
run() { local n=$1 t=$2; shift 2; timeout -k 5 $t "$@" > $O/logs/$n.log 2>&1; echo "== $n rc=$? $((SECONDS-t0)) s" >> $S
  grep -E "ping|one way|round trip|checks|FAIL|error|mismatch" $O/logs/$n.log | tail -8 | cut -c1-220 >> $S; }
run ch2_mps 90 env RW_STREAM_ITERS=20,2000,20000 $B/rwrun -n 2 $B/rw-gpuapp channels
run ch4_mps 90 env RW_STREAM_ITERS=20,2000 $B/rwrun -n 4 $B/rw-gpuapp channels
run lat_mps 60 $B/rwrun -n 2 $B/rankwire-bench latency -d cuda --max-size 64 -i 2000 --warmup 50
# OSU 7.2 built with --enable-cuda against our ABI, with validation (-c), under MPS (the
# same step as scripts/gpu-abi.sh; its summary did not come back from call A).
t1=$SECONDS
OSU_TARBALL=$B/osu-micro-benchmarks-7.2.tar.gz MPICC=$PWD/abi/bin/mpicc MPICXX=$PWD/abi/bin/mpicxx \
  MPIEXEC="$B/rwrun" ABI_LIBDIR="$B/lib" RANKWIRE_ABI_LIBDIR="$B/lib" OSU_NP=2 OSU_ALLOW_FAIL=1 \
  OSU_ONLY='osu_latency$|osu_bw$|osu_bibw$|osu_allreduce$|osu_bcast$|osu_allgather$|osu_reduce$|osu_iallreduce$' \
  OSU_ARGS='-m 1:4194304 -i 100 -x 10' PATH=/usr/local/cuda/bin:$PATH CUDA_HOME=/usr/local/cuda \
  timeout 200 scripts/osu.sh --cuda > $O/logs/osu_cuda.log 2>&1
echo "== osu --cuda rc=$? $((SECONDS-t1)) s" >> $S
cp target/osu/summary.txt $O/logs/osu_cuda_summary.txt 2>/dev/null && cat target/osu/summary.txt >> $S
cp -r target/osu/logs $O/logs/osu_cuda_logs 2>/dev/null
mps_stop
# gpu-run.sh, the steps issue 18 asks about (the whole script does not fit the device
# time left): doctor/explain and the checks with and without MPS, the peer-memory forms,
# the stream-ordered p2p, and the allreduce benchmarks to 256 MiB.
export GPU_ONLY=${GPU_ONLY:-'^(coll_check_2|coll_bench_2|doctor_mps|explain_mps|coll_check_2_mps|coll_peer_[24]_mps|stream_p2p_mps)$'}
export GPU_COLL_BENCH_MAX=268435456 GPU_COLL_MAX=16777216
timeout -k 10 $((${RUN_LIMIT:-380} - (SECONDS - t0))) scripts/gpu-run.sh $O/gpu-run > $O/gpu-run.out 2>&1; echo "== gpu-run rc=$? $((SECONDS-t0)) s" >> $S
grep -E "^=== |gpu-run:" $O/gpu-run/summary.txt | cut -c1-200 >> $S
tar czf $O/logs.tgz -C $O logs gpu-run && rm -rf $O/logs $O/gpu-run
cat $S
