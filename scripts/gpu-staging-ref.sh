#!/usr/bin/env bash
# The reference of issue 19's "≥ 85 % of host-buffer TCP bandwidth", measured right: two
# ranks on one node forced onto TCP (RANKWIRE_TRANSPORTS=tcp) still move large host
# messages by cross-memory attach (single copy, process_vm_readv) unless RANKWIRE_CMA=0,
# while device buffers always go through the TCP socket. So, interleaved per repeat:
# device buffers staged over TCP, host buffers over TCP with RANKWIRE_CMA=0 (bytes
# through the socket, as between nodes), and host buffers with CMA (what earlier runs
# used as the reference). rankwire-bench bw, window 4, 4-256 MiB; then 1 GiB, window 1.
# Binaries from scripts/gpu-build.sh in .device-bin/ (GPU_BIN=DIR for another build).
# Output: OUTDIR (default gpu-results/staging-ref): one log per run, summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu-results/staging-ref}
mkdir -p "$OUT"
B=${GPU_BIN:-.device-bin}
run() { # NAME ENV... -- BENCH ARGS
  local name=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  timeout 300 env "${envs[@]}" $B/rwrun -n 2 $B/rankwire-bench bw "$@" > "$OUT/$name.log" 2>&1
  echo "$name: $(awk '$1 ~ /^[0-9]+$/ { printf "%s=%s ", $1, $2 }' "$OUT/$name.log")" | tee -a "$OUT/summary.txt"
}
T=(RANKWIRE_TRANSPORTS=tcp RANKWIRE_CUDA_IPC=0)
mid=(--min-size 4194304 --max-size 268435456 --window 4 -i 20 --warmup 2)
big=(--min-size 1073741824 --max-size 1073741824 --window 1 -i 4 --warmup 1)
for rep in $(seq 1 "${REPEATS:-3}"); do
  run dev_tcp_$rep "${T[@]}" -- -d cuda "${mid[@]}"
  run host_tcp_nocma_$rep "${T[@]}" RANKWIRE_CMA=0 -- -d host "${mid[@]}"
  run host_tcp_cma_$rep "${T[@]}" -- -d host "${mid[@]}"
done
run dev_tcp_1g "${T[@]}" -- -d cuda "${big[@]}"
run host_tcp_nocma_1g "${T[@]}" RANKWIRE_CMA=0 -- -d host "${big[@]}"
run host_tcp_cma_1g "${T[@]}" -- -d host "${big[@]}"
