#!/usr/bin/env bash
# Device buffers through host memory (issue 19, "pipelined staging"): correctness and
# bandwidth on the GPU machine, two ranks forced off CUDA IPC — over TCP
# (RANKWIRE_TRANSPORTS=tcp RANKWIRE_CUDA_IPC=0, as device buffers between nodes without
# GPUDirect go; without CUDA_IPC=0 device messages on one node take CUDA IPC) and
# over shared memory (RANKWIRE_CUDA_IPC=0). Uses the binaries scripts/gpu-build.sh put
# in .device-bin/ (GPU_BIN=DIR for another build); with GPU_BASE=DIR (binaries of the
# commit to compare with: rwrun, rankwire-bench, rw-gpuapp) each timing step runs both
# builds, interleaved, in the same run. Host-buffer TCP bandwidth of the same run is
# the reference the issue's target names (≥ 85 % of it).
# Results: OUTDIR (default ./gpu-results/staging): one log per step, summary.txt.
# GPU_MPS=0 skips the second pass (the bandwidth steps again under the MPS control
# daemon, scripts/mps.sh; without MPS the two ranks time-slice the GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/mps.sh
trap mps_stop EXIT
OUT=${1:-gpu-results/staging}
mkdir -p "$OUT"
B=${GPU_BIN:-.device-bin}
BASE=${GPU_BASE:-}
fails=0
TCP="RANKWIRE_TRANSPORTS=tcp RANKWIRE_CUDA_IPC=0"
# step NAME TIMEOUT CMD...
. scripts/gpu-step.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$OUT/summary.txt"
# The path each pair takes, as rwrun explains it.
step explain_tcp 120 env $TCP $B/rwrun -n 2 --explain $B/rw-gpuapp reuse
# Correctness: every size pattern of rw-gpuapp check, device and mixed buffers.
step check_tcp_64m 600 env $TCP $B/rwrun -n 2 $B/rw-gpuapp check 67108864
step check_tcp_depth1 600 env $TCP RANKWIRE_GPU_STAGE_DEPTH=1 $B/rwrun -n 2 $B/rw-gpuapp check 16777216
step check_tcp_depth8_chunk1m 600 env $TCP RANKWIRE_GPU_STAGE_DEPTH=8 RANKWIRE_GPU_STAGE_CHUNK=1M $B/rwrun -n 2 $B/rw-gpuapp check 16777216
step check_noipc_64m 600 env RANKWIRE_CUDA_IPC=0 $B/rwrun -n 2 $B/rw-gpuapp check 67108864
step reuse_tcp 300 env $TCP $B/rwrun -n 2 $B/rw-gpuapp reuse
# Bandwidth, 1 MiB to 256 MiB (window 4), then 1 GiB (window 1).
bw() { # bw NAME BIN ENV... -- BENCH ARGS
  local name=$1 bin=$2; shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  step "$name" 600 env "${envs[@]}" "$bin/rwrun" -n 2 "$bin/rankwire-bench" bw "$@"
}
mid=(--min-size 1048576 --max-size 268435456 --window 4 -i 100 --warmup 2)
big=(--min-size 1073741824 --max-size 1073741824 --window 1 -i 40 --warmup 1)
for rep in 1 2; do
  bw tcp_host_$rep $B $TCP -- -d host "${mid[@]}"
  bw tcp_dev_$rep $B $TCP -- -d cuda "${mid[@]}"
  [ -n "$BASE" ] && bw tcp_dev_base_$rep $BASE $TCP -- -d cuda "${mid[@]}"
  [ -n "$BASE" ] && bw tcp_host_base_$rep $BASE $TCP -- -d host "${mid[@]}"
done
bw tcp_dev_depth1 $B $TCP RANKWIRE_GPU_STAGE_DEPTH=1 -- -d cuda "${mid[@]}"
bw tcp_dev_depth4 $B $TCP RANKWIRE_GPU_STAGE_DEPTH=4 -- -d cuda "${mid[@]}"
bw tcp_dev_chunk1m $B $TCP RANKWIRE_GPU_STAGE_CHUNK=1M RANKWIRE_GPU_STAGE_DEPTH=4 -- -d cuda "${mid[@]}"
# GPU_SWEEP=1: chunk size x depth at 16-64 MiB (for the defaults).
if [ "${GPU_SWEEP:-0}" = 1 ]; then
  for c in 256K 512K 1M 2M 4M; do
    for d in 2 4 8; do
      bw sweep_${c}_$d $B $TCP RANKWIRE_GPU_STAGE_CHUNK=$c RANKWIRE_GPU_STAGE_DEPTH=$d -- -d cuda --min-size 16777216 --max-size 67108864 --window 4 -i 100 --warmup 2
    done
  done
fi
bw tcp_host_1g $B $TCP -- -d host "${big[@]}"
bw tcp_dev_1g $B $TCP -- -d cuda "${big[@]}"
[ -n "$BASE" ] && bw tcp_dev_base_1g $BASE $TCP -- -d cuda "${big[@]}"
# Shared memory with CUDA IPC off (device chunks staged through the rings).
bw noipc_dev $B RANKWIRE_CUDA_IPC=0 -- -d cuda "${mid[@]}"
[ -n "$BASE" ] && bw noipc_dev_base $BASE RANKWIRE_CUDA_IPC=0 -- -d cuda "${mid[@]}"
bw shm_host $B RANKWIRE_CUDA_IPC=0 -- -d host "${mid[@]}"
# Small device messages (eager, synchronous path) must not change.
step lat_tcp_dev 300 env $TCP $B/rwrun -n 2 $B/rankwire-bench latency -d cuda --max-size 65536 -i 2000 --warmup 50
[ -n "$BASE" ] && step lat_tcp_dev_base 300 env $TCP $BASE/rwrun -n 2 $BASE/rankwire-bench latency -d cuda --max-size 65536 -i 2000 --warmup 50
# The MPS pass: the main bandwidth steps with both ranks' device work concurrent.
if [ "${GPU_MPS:-1}" != 0 ]; then
  if mps_start; then
    echo "=== mps pass: $MPS_WHY" | tee -a "$OUT/summary.txt"
    bw tcp_host_mps $B $TCP -- -d host "${mid[@]}"
    bw tcp_dev_mps $B $TCP -- -d cuda "${mid[@]}"
    [ -n "$BASE" ] && bw tcp_dev_base_mps $BASE $TCP -- -d cuda "${mid[@]}"
    bw noipc_dev_mps $B RANKWIRE_CUDA_IPC=0 -- -d cuda "${mid[@]}"
    [ -n "$BASE" ] && bw noipc_dev_base_mps $BASE RANKWIRE_CUDA_IPC=0 -- -d cuda "${mid[@]}"
    mps_stop
  else
    echo "=== mps pass: skipped ($MPS_WHY)" | tee -a "$OUT/summary.txt"
  fi
fi
echo "=== failures: $fails" | tee -a "$OUT/summary.txt"
[ $fails = 0 ]
