#!/usr/bin/env bash
# One device session's GPU verification with before/after figures (run on the GPU machine):
#   1. scripts/gpu-run.sh on the new build (.device-bin), every step (its own MPS pass
#      included, unless GPU_COMPARE_FULL=0);
#   2. the timing steps (device p2p latency/bandwidth, IPC bandwidth, device allreduce at
#      2 and 4 ranks) on a baseline build (BASE_BIN, default .device-bin/base), if present;
#   3. the same timing steps for both builds again with MPS running (nvidia-cuda-mps-control
#      -d, as root; stopped again at the end), since two ranks on one GPU time-slice without
#      it: twice each in ABBA order (GPU_COMPARE_REPEAT=0: once each), best row of each;
#   4. compare.txt: the figures side by side (after ÷ before).
# A device command may run 10 minutes: run gpu-run.sh alone first, then this with
# GPU_COMPARE_FULL=0.
# Usage: scripts/gpu-compare.sh OUTDIR   (OUTDIR gets one tarball per run and compare.txt)
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/mps.sh
trap mps_stop EXIT
trap 'exit 130' INT TERM
OUT=${1:?usage: gpu-compare.sh OUTDIR}
mkdir -p "$OUT"
W=$(mktemp -d)
BASE=${BASE_BIN:-.device-bin/base}
TIMING='^(bench|p2p_latency|p2p_bw|coll_bench_2|coll_bench_4)$'
# GPU_COMPARE_FULL=0: the new build runs the timing steps only (the full run was its own call)
if [ "${GPU_COMPARE_FULL:-1}" = 0 ]; then ONLY=$TIMING; else ONLY=${GPU_ONLY:-}; fi
GPU_ONLY=$ONLY scripts/gpu-run.sh "$W/after" >"$W/after.out" 2>&1; echo "after: exit $?" >>"$OUT/status.txt"
if [ -x "$BASE/rwrun" ]; then
  GPU_BIN=$BASE GPU_ONLY=$TIMING GPU_MPS=0 scripts/gpu-run.sh "$W/before" >"$W/before.out" 2>&1
  echo "before: exit $?" >>"$OUT/status.txt"
fi
if [ "$(id -u)" = 0 ] && [ -n "$(mps_ctl)" ]; then
  if mps_start "$W/mps-pipe" "$W/mps-log"; then
    # In ABBA order (after, before, before, after): the first run after the MPS server
    # starts was seen slower by up to 20%, so neither build always goes first; the
    # comparison takes each build's best row of its two runs.
    mps_run() { # mps_run NAME BIN   (gpu-run.sh's first pass, under this daemon)
      [ -x "$2/rwrun" ] || return 0
      GPU_BIN=$2 GPU_ONLY=$TIMING GPU_MPS=0 scripts/gpu-run.sh "$W/$1" >"$W/$1.out" 2>&1
      echo "$1: exit $?" >>"$OUT/status.txt"
    }
    mps_run after-mps "${GPU_BIN:-.device-bin}"
    mps_run before-mps "$BASE"
    if [ "${GPU_COMPARE_REPEAT:-1}" = 1 ]; then
      mps_run before-mps-2 "$BASE"
      mps_run after-mps-2 "${GPU_BIN:-.device-bin}"
    fi
    mps_stop
  else
    echo "mps: $MPS_WHY" >>"$OUT/status.txt"
  fi
fi
python3 scripts/gpu-compare.py "$W" >"$OUT/compare.txt" 2>&1
for d in after before after-mps before-mps after-mps-2 before-mps-2; do
  [ -d "$W/$d" ] && cp "$W/$d.out" "$W/$d/run.out" && tar czf "$OUT/$d.tgz" -C "$W" "$d"
done
cat "$OUT/status.txt" "$OUT/compare.txt"
