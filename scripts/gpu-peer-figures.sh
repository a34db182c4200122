#!/usr/bin/env bash
# The figures of the peer-memory collectives and the small device messages (issue 18),
# in one run on a GPU machine, with the binaries of scripts/gpu-build.sh (.device-bin/)
# and a baseline build in $BASE (default .device-bin/base, skipped where absent).
# Output: OUTDIR/*.txt. Without MPS first, then with the MPS daemon (scripts/mps.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu-peer-results}
mkdir -p "$OUT"
B=${GPU_BIN:-.device-bin}
BASE=${BASE:-.device-bin/base}
MAX=${PEER_FIG_MAX:-268435456}
. scripts/mps.sh
trap mps_stop EXIT
run() { # run NAME TIMEOUT CMD...
  local name=$1 t=$2; shift 2
  echo "=== $name: $*" | tee -a "$OUT/summary.txt"
  timeout -k 5 "$t" "$@" >"$OUT/$name.txt" 2>&1
  echo "=== $name: exit $?" | tee -a "$OUT/summary.txt"
}
pass() { # pass SUFFIX
  local s=$1 n
  for n in 2 4; do
    run latency_${n}$s 120 $B/rwrun -n $n $B/rw-gpucoll latency 8
    run allreduce_${n}$s 300 $B/rwrun -n $n $B/rankwire-bench allreduce -d cuda --max-size $MAX -i 300 --warmup 10
    run allreduce_nopeer_${n}$s 300 env RANKWIRE_GPU_PEER=off $B/rwrun -n $n $B/rankwire-bench allreduce -d cuda --max-size $MAX -i 300 --warmup 10
    [ -x $BASE/rankwire-bench ] && run allreduce_base_${n}$s 300 $BASE/rwrun -n $n $BASE/rankwire-bench allreduce -d cuda --max-size $MAX -i 300 --warmup 10
  done
  run p2p_latency$s 200 $B/rwrun -n 2 $B/rankwire-bench latency -d cuda --max-size 1048576 -i 1000 --warmup 20
  run p2p_latency_rndv$s 200 env RANKWIRE_GPU_EAGER_MAX=0 $B/rwrun -n 2 $B/rankwire-bench latency -d cuda --max-size 1048576 -i 1000 --warmup 20
}
pass ""
if mps_start /tmp/mps-pipe /tmp/mps-log; then
  echo "=== mps: $MPS_WHY" | tee -a "$OUT/summary.txt"
  pass _mps
  for n in 2 3 4; do
    run check_${n}_mps 300 $B/rwrun -n $n $B/rw-gpucoll check ${PEER_CHECK_MAX:-4194304}
    run peer_${n}_mps 300 $B/rwrun -n $n $B/rw-gpucoll peer 4194304
  done
  mps_stop
else
  echo "=== mps: not started: $MPS_WHY" | tee -a "$OUT/summary.txt"
fi
