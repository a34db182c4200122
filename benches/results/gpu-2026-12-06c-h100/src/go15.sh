#!/usr/bin/env bash
set -u
export PATH=$PATH:/usr/local/cuda/bin
B=$PWD/.device-bin
O=${OUT:-/tmp/out}; mkdir -p $O
S=$O/summary.txt
nvidia-smi -L > $S
nvcc -o /tmp/fl $B/flaglat.c -lcuda >> $S 2>&1
echo "== no MPS" >> $S; timeout 60 /tmp/fl >> $S 2>&1
. scripts/mps.sh; mps_start > /dev/null
echo "== MPS" >> $S; timeout 60 /tmp/fl >> $S 2>&1
mps_stop
