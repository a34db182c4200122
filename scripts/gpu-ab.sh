#!/usr/bin/env bash
# Before/after of device point-to-point on the GPU machine: two builds (binaries from
# scripts/gpu-build.sh: rwrun, rankwire-bench), interleaved, in one run. No MPS (two ranks
# time-slice the one GPU, as by default).
# GPU_BASE=DIR (default .device-bin/base), GPU_BIN=DIR (default .device-bin), REPEATS
# (default 2). Output: OUTDIR (default gpu-results/ab): one log per run, summary.txt with
# the 8 B / 64 KiB latency and 4 MiB / 64 MiB bandwidth cells per build and repeat.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu-results/ab}
mkdir -p "$OUT"
NEW=${GPU_BIN:-.device-bin}
BASE=${GPU_BASE:-.device-bin/base}
TCP="RANKWIRE_TRANSPORTS=tcp RANKWIRE_CUDA_IPC=0"
cell() { awk -v s="$2" '$1 == s { print $2 }' "$1"; }
for i in $(seq 1 "${REPEATS:-2}"); do
  # Alternate which build goes first.
  order="base new"; [ $((i % 2)) = 0 ] && order="new base"
  for b in $order; do
    if [ $b = base ]; then B=$BASE; else B=$NEW; fi
    lat=$OUT/lat-$b-$i.log bw=$OUT/bw-$b-$i.log tcp=$OUT/tcpbw-$b-$i.log
    timeout 120 $B/rwrun -n 2 $B/rankwire-bench latency -d cuda --max-size 65536 -i 1000 --warmup 50 > "$lat" 2>&1
    timeout 120 $B/rwrun -n 2 $B/rankwire-bench bw -d cuda --max-size 67108864 --window 16 -i 50 --warmup 5 > "$bw" 2>&1
    timeout 120 env $TCP $B/rwrun -n 2 $B/rankwire-bench bw -d cuda --min-size 4194304 --max-size 67108864 --window 4 -i 20 --warmup 2 > "$tcp" 2>&1
    printf '%s run %s: latency 8 B %s us, 64 KiB %s us; ipc bw 4 MiB %s, 64 MiB %s MB/s; tcp staged bw 4 MiB %s, 64 MiB %s MB/s\n' \
      $b $i "$(cell "$lat" 8)" "$(cell "$lat" 65536)" "$(cell "$bw" 4194304)" "$(cell "$bw" 67108864)" \
      "$(cell "$tcp" 4194304)" "$(cell "$tcp" 67108864)" | tee -a "$OUT/summary.txt"
  done
done
