#!/usr/bin/env bash
# Floors of one small device operation on the GPU machine (benches/gpu/floors.cu), without
# and with MPS, under the default and the spin scheduling of the context. Writes
# $OUT/floors.txt (or ./floors.txt). Needs nvcc and a GPU; the device tool runs it:
#   run: bash scripts/gpu-floors.sh
set -u
cd "$(dirname "$0")/.."
. scripts/mps.sh
out=${OUT:-.}/floors.txt
tmp=$(mktemp -d); trap 'mps_stop; rm -rf "$tmp"' EXIT
PATH=$PATH:/usr/local/cuda/bin nvcc -O2 -o "$tmp/floors" benches/gpu/floors.cu -lcuda || { echo "nvcc failed" | tee "$out"; exit 1; }
{
  echo "== $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  for sched in 0 1; do echo "== no MPS, sched $sched"; "$tmp/floors" 2000 "$sched"; done
  if mps_start; then
    for sched in 0 1; do echo "== MPS, sched $sched"; "$tmp/floors" 2000 "$sched"; done
    echo "== MPS, two processes at once (sched 1), first then second"
    "$tmp/floors" 2000 1 > "$tmp/a.txt" & "$tmp/floors" 2000 1 > "$tmp/b.txt"; wait
    cat "$tmp/a.txt" "$tmp/b.txt"
  else echo "== MPS not started: $MPS_WHY"; fi
} 2>&1 | tee "$out"
