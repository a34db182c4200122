#!/usr/bin/env bash
# Run every GPU test and benchmark on a machine with a GPU, using the binaries that
# scripts/gpu-build.sh put in .device-bin/ (nothing is built here). Results go to
# OUTDIR (default ./gpu-results): one log per step and summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu-results}
mkdir -p "$OUT"
B=${GPU_BIN:-.device-bin}  # GPU_BIN=DIR runs another build (e.g. a baseline for before/after)
fails=0
step() { # step NAME TIMEOUT CMD...   (GPU_ONLY=REGEX runs only the steps it matches)
  local name=$1 t=$2; shift 2
  if [ -n "${GPU_ONLY:-}" ] && ! [[ $name =~ $GPU_ONLY ]]; then return 0; fi
  echo "=== $name: $*" | tee -a "$OUT/summary.txt"
  timeout -k 5 "$t" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 40 "$OUT/$name.log"
  echo "=== $name: exit $rc" | tee -a "$OUT/summary.txt"
  [ $rc = 0 ] || fails=$((fails + 1))
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$OUT/summary.txt"
step selftest 300 $B/gpu_selftest
step doctor 120 $B/rwrun --doctor
step explain 120 $B/rwrun -n 2 --explain $B/rw-gpuapp reuse
step check 600 $B/rwrun -n 2 $B/rw-gpuapp check ${GPU_CHECK_MAX:-67108864}
step reuse 300 $B/rwrun -n 2 $B/rw-gpuapp reuse
step cudarc 300 $B/rwrun -n 2 --report-bindings $B/rw-gpuapp cudarc
step check_noipc 600 env RANKWIRE_CUDA_IPC=0 $B/rwrun -n 2 $B/rw-gpuapp check 4194304
step check_tcp 600 env RANKWIRE_TRANSPORTS=tcp $B/rwrun -n 2 $B/rw-gpuapp check 4194304
step bench 600 $B/rwrun -n 2 $B/rw-gpuapp bench ${GPU_BENCH_MAX:-1073741824}
# OSU-style point-to-point on device buffers through rankwire-bench (-d cuda).
step p2p_latency 300 $B/rwrun -n 2 $B/rankwire-bench latency -d cuda --max-size 4194304 -i 2000 --warmup 50
step p2p_bw 300 $B/rwrun -n 2 $B/rankwire-bench bw -d cuda --max-size 67108864 --window 16 -i 100 --warmup 10
# Pool memory (cudarc's allocator): through an IPC-capable staging buffer, and without it.
step bench_pool 300 env RW_GPU_BENCH_MEM=pool $B/rwrun -n 2 $B/rw-gpuapp bench 268435456
step bench_pool_hoststaged 300 env RW_GPU_BENCH_MEM=pool RANKWIRE_GPU_IPC_STAGING=0 $B/rwrun -n 2 $B/rw-gpuapp bench 67108864
# Collectives on device buffers (issue #6): 2, 3 and 4 ranks sharing the GPU.
for n in 2 3 4; do
  step coll_check_$n 600 $B/rwrun -n $n $B/rw-gpucoll check ${GPU_COLL_MAX:-67108864}
done
step coll_kernel 300 $B/rw-gpucoll kernel ${GPU_KERNEL_MAX:-1073741824}
for n in 2 4; do
  step coll_bench_$n 600 $B/rwrun -n $n $B/rankwire-bench allreduce -d cuda --max-size ${GPU_COLL_BENCH_MAX:-1073741824} -i 1000 --warmup 20
  # The same without the staged small-message path (schedules only), for the threshold.
  step coll_bench_nostaged_$n 300 env RANKWIRE_GPU_ALLREDUCE_STAGED_MAX=0 $B/rwrun -n $n $B/rankwire-bench allreduce -d cuda --max-size 4194304 -i 1000 --warmup 20
done
# The path users of the installed, non-CUDA-aware Open MPI take (host staging), in the
# same run, for the ratio. Optional: skipped where mpirun/mpi4py/cupy are missing.
if command -v mpirun >/dev/null && python3 -c 'import mpi4py, cupy' 2>/dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  step ompi_host_staged 300 mpirun --allow-run-as-root --oversubscribe -n 2 python3 benches/gpu/host_staged_ompi.py
  for n in 2 4; do
    step ompi_allreduce_$n 600 mpirun --allow-run-as-root --oversubscribe -n $n python3 benches/gpu/host_staged_allreduce_ompi.py ${GPU_OMPI_MAX:-268435456}
  done
else
  echo "=== ompi_host_staged: skipped (mpirun, mpi4py or cupy missing)" | tee -a "$OUT/summary.txt"
fi
echo "gpu-run: $fails step(s) failed" | tee -a "$OUT/summary.txt"
[ $fails = 0 ]
