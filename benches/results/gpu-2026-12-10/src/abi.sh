#!/usr/bin/env bash
# GPU call A of 2026-12-10 (one device call, < 10 min): issue 20's GPU checks on the
# current library: scripts/gpu-abi.sh (device buffers through the ABI, host C tests,
# OSU 7.2 built with --enable-cuda: validation and timing, MPICH's ABI library as the
# reference), then mpi4py with cupy arrays under MPS at 2 and 4 ranks.
set -u
O=${OUT:-/tmp/out}; mkdir -p $O
t0=$SECONDS
echo "build $(cat .device-bin/REV)" > $O/head.txt; nvidia-smi -L >> $O/head.txt
RUN_TIMEOUT=120 timeout -k 5 400 scripts/gpu-abi.sh $O/abi > $O/abi.out 2>&1; echo "gpu-abi rc=$? $((SECONDS-t0)) s" >> $O/head.txt
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $O/head.txt
timeout -k 5 $((560 - (SECONDS - t0))) scripts/gpu-mpi4py.sh $O/mpi4py 2 4 > $O/mpi4py.out 2>&1; echo "mpi4py rc=$? $((SECONDS-t0)) s" >> $O/head.txt
mps_stop
cat $O/head.txt $O/abi/summary.txt $O/mpi4py/summary.txt 2>/dev/null | cut -c1-400
