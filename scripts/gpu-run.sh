#!/usr/bin/env bash
# Run every GPU test and benchmark on a machine with a GPU, using the binaries that
# scripts/gpu-build.sh put in .device-bin/ (nothing is built here). Results go to
# OUTDIR (default ./gpu-results): one log per step and summary.txt.
#
# Two passes (issue 18): every step without MPS; then, with the MPS control daemon
# started here (scripts/mps.sh: as root, CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe,
# CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log; stopped at the end and on exit), the benchmark
# steps again (bench, p2p_latency, p2p_bw, coll_bench_*, the ompi reference steps), stream_p2p,
# doctor, explain, coll_check_{2,3,4}, coll_peer_{2,3,4} and coll_check_nopeer_2, each named
# with the suffix _mps. Where
# the daemon cannot start, summary.txt says why and the MPS pass is skipped.
# GPU_ONLY=REGEX runs only the steps whose names it matches (both passes; the daemon is
# started only if an _mps step is wanted). GPU_MPS=0: no MPS pass (the first pass then
# runs in the environment as given: gpu-compare.sh runs it under its own daemon).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/mps.sh
trap mps_stop EXIT
trap 'exit 130' INT TERM
OUT=${1:-gpu-results}
mkdir -p "$OUT"
B=${GPU_BIN:-.device-bin}  # GPU_BIN=DIR runs another build (e.g. a baseline for before/after)
fails=0
wanted() { [ -z "${GPU_ONLY:-}" ] || [[ $1 =~ $GPU_ONLY ]]; }
# step NAME TIMEOUT CMD... (GPU_ONLY=REGEX runs only the steps `wanted` matches)
. scripts/gpu-step.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$OUT/summary.txt"
if mps_running; then
  echo "=== note: an MPS daemon already listens on ${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}: the first pass runs with MPS" | tee -a "$OUT/summary.txt"
fi
step selftest 300 $B/gpu_selftest
step doctor 120 $B/rwrun -n 2 --doctor
step explain 120 $B/rwrun -n 2 --explain $B/rw-gpuapp reuse
step check 600 $B/rwrun -n 2 $B/rw-gpuapp check ${GPU_CHECK_MAX:-67108864}
step reuse 300 $B/rwrun -n 2 $B/rw-gpuapp reuse
step cudarc 300 $B/rwrun -n 2 --report-bindings $B/rw-gpuapp cudarc
# Stream-ordered point-to-point between user kernels (issue 18), and its one-way time.
step stream_p2p 120 $B/rwrun -n 2 $B/rw-gpuapp streamp2p
# GPUDirect RDMA's GPU side without a NIC: device regions, DMA-BUF export, buffer ids.
step gdrside 120 $B/rwrun -n 2 $B/rw-gpuapp gdrside
step check_noipc 600 env RANKWIRE_CUDA_IPC=0 $B/rwrun -n 2 $B/rw-gpuapp check 4194304
# Device buffers staged through host memory over TCP (CUDA IPC off: with it, device
# messages between ranks of one node take CUDA IPC whatever the host transport is).
step check_tcp 600 env RANKWIRE_TRANSPORTS=tcp RANKWIRE_CUDA_IPC=0 $B/rwrun -n 2 $B/rw-gpuapp check 4194304
# The timing steps of both passes: step names get suffix $1 ("" or _mps).
bench_p2p() {
  local s=$1
  step bench$s 600 $B/rwrun -n 2 $B/rw-gpuapp bench ${GPU_BENCH_MAX:-1073741824}
  # OSU-style point-to-point on device buffers through rankwire-bench (-d cuda).
  step p2p_latency$s 300 $B/rwrun -n 2 $B/rankwire-bench latency -d cuda --max-size 4194304 -i 2000 --warmup 50
  step p2p_bw$s 300 $B/rwrun -n 2 $B/rankwire-bench bw -d cuda --max-size 67108864 --window 16 -i 100 --warmup 10
}
bench_coll() {
  local s=$1 n
  for n in 2 4; do
    step coll_bench_$n$s 600 $B/rwrun -n $n $B/rankwire-bench allreduce -d cuda --max-size ${GPU_COLL_BENCH_MAX:-1073741824} -i 1000 --warmup 20
    # The same without the staged small-message path (schedules only), for the threshold.
    step coll_bench_nostaged_$n$s 300 env RANKWIRE_GPU_ALLREDUCE_STAGED_MAX=0 $B/rwrun -n $n $B/rankwire-bench allreduce -d cuda --max-size 4194304 -i 1000 --warmup 20
    # The host-scheduled path of the same run (peer-memory collectives off), for the ratio.
    step coll_bench_nopeer_$n$s 600 env RANKWIRE_GPU_PEER=off $B/rwrun -n $n $B/rankwire-bench allreduce -d cuda --max-size ${GPU_COLL_BENCH_MAX:-1073741824} -i 1000 --warmup 20
  done
}
# The path users of the installed, non-CUDA-aware Open MPI take (host staging), in the
# same run, for the ratio. Optional: skipped where mpirun/mpi4py/cupy are missing.
bench_ompi() {
  local s=$1 n
  if command -v mpirun >/dev/null && python3 -c 'import mpi4py, cupy' 2>/dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    step ompi_host_staged$s 300 mpirun --allow-run-as-root --oversubscribe -n 2 python3 benches/gpu/host_staged_ompi.py
    for n in 2 4; do
      step ompi_allreduce_$n$s 600 mpirun --allow-run-as-root --oversubscribe -n $n python3 benches/gpu/host_staged_allreduce_ompi.py ${GPU_OMPI_MAX:-268435456}
    done
  elif wanted ompi_host_staged$s; then
    echo "=== ompi_host_staged$s: skipped (mpirun, mpi4py or cupy missing)" | tee -a "$OUT/summary.txt"
  fi
}
bench_p2p ""
# Pool memory (cudarc's allocator): through an IPC-capable staging buffer, and without it.
step bench_pool 300 env RW_GPU_BENCH_MEM=pool $B/rwrun -n 2 $B/rw-gpuapp bench 268435456
step bench_pool_hoststaged 300 env RW_GPU_BENCH_MEM=pool RANKWIRE_GPU_IPC_STAGING=0 $B/rwrun -n 2 $B/rw-gpuapp bench 67108864
# Collectives on device buffers (issue #6): 2, 3 and 4 ranks sharing the GPU.
for n in 2 3 4; do
  step coll_check_$n 600 $B/rwrun -n $n $B/rw-gpucoll check ${GPU_COLL_MAX:-67108864}
done
# In-place and stream-ordered forms, pool buffers (issue 18): without MPS the
# peer-memory path is off (ranks share the GPU), so these run the host schedules; the
# forced step runs the peer kernels time-sliced (slow, but must be correct).
for n in 2 4; do
  step coll_peer_$n 600 $B/rwrun -n $n $B/rw-gpucoll peer ${GPU_PEER_MAX:-4194304}
done
step coll_peer_forced_2 150 env RANKWIRE_GPU_PEER=on RANKWIRE_GPU_PEER_TIMEOUT=60 $B/rwrun -n 2 $B/rw-gpucoll peer 4099
step coll_kernel 300 $B/rw-gpucoll kernel ${GPU_KERNEL_MAX:-1073741824}
bench_coll ""
bench_ompi ""
# The MPS pass.
mps_steps=(doctor_mps explain_mps coll_check_2_mps coll_check_3_mps coll_check_4_mps
  stream_p2p_mps coll_peer_2_mps coll_peer_3_mps coll_peer_4_mps coll_check_nopeer_2_mps bench_mps p2p_latency_mps
  p2p_bw_mps coll_bench_2_mps coll_bench_nostaged_2_mps coll_bench_nopeer_2_mps coll_bench_4_mps
  coll_bench_nostaged_4_mps coll_bench_nopeer_4_mps
  ompi_host_staged_mps ompi_allreduce_2_mps ompi_allreduce_4_mps)
want_mps=0
for m in "${mps_steps[@]}"; do wanted "$m" && want_mps=1; done
if [ "${GPU_MPS:-1}" = 0 ]; then
  [ $want_mps = 1 ] && echo "=== mps pass: skipped (GPU_MPS=0)" | tee -a "$OUT/summary.txt"
elif [ $want_mps = 1 ]; then
  if mps_start "${CUDA_MPS_PIPE_DIRECTORY:-/tmp/mps-pipe}" "${CUDA_MPS_LOG_DIRECTORY:-/tmp/mps-log}"; then
    echo "=== mps pass: $MPS_WHY" | tee -a "$OUT/summary.txt"
    step doctor_mps 120 $B/rwrun -n 2 --doctor
    step explain_mps 120 $B/rwrun -n 2 --explain $B/rw-gpuapp reuse
    for n in 2 3 4; do
      step coll_check_${n}_mps 600 $B/rwrun -n $n $B/rw-gpucoll check ${GPU_COLL_MAX:-67108864}
      step coll_peer_${n}_mps 600 $B/rwrun -n $n $B/rw-gpucoll peer ${GPU_PEER_MAX:-4194304}
    done
    step coll_check_nopeer_2_mps 600 env RANKWIRE_GPU_PEER=off $B/rwrun -n 2 $B/rw-gpucoll check 4194304
    step stream_p2p_mps 120 $B/rwrun -n 2 $B/rw-gpuapp streamp2p
    bench_p2p _mps
    bench_coll _mps
    bench_ompi _mps
    mps_stop
  else
    echo "=== mps pass: skipped: could not start the MPS daemon: $MPS_WHY" | tee -a "$OUT/summary.txt"
  fi
fi
echo "gpu-run: $fails step(s) failed" | tee -a "$OUT/summary.txt"
[ $fails = 0 ]
