#!/usr/bin/env bash
# Which CUDA_DEVICE_MAX_CONNECTIONS lets 4 MPS clients start, and does the 4-rank
# two-stream proxy ring pass with it (run3: 32 failed at context creation).
set -u
B=$PWD/.device-bin
O=${OUT:-/tmp/out}; mkdir -p $O/logs; S=$O/summary.txt
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" > $S
for c in 4 8 16; do
  timeout -k 5 45 env CUDA_DEVICE_MAX_CONNECTIONS=$c RW_CH_SIZES=8,8388608 $B/rwrun -n 4 $B/rw-gpuapp proxyring > $O/logs/px4_c$c.log 2>&1
  echo "px_mps_4r_2streams_c$c rc=$? ok=$(grep -c 'proxyring OK' $O/logs/px4_c$c.log)" >> $S
  grep -E "FAILED|WARN" $O/logs/px4_c$c.log | head -2 | cut -c1-200 >> $S
done
timeout -k 5 45 env RW_CH_SIZES=8,8388608 $B/rwrun -n 4 $B/rw-gpuapp proxyring > $O/logs/px4_default.log 2>&1
echo "px_mps_4r_2streams_default rc=$? ok=$(grep -c 'proxyring OK' $O/logs/px4_default.log)" >> $S
mps_stop
tar czf $O/logs.tgz -C $O logs && rm -rf $O/logs
cat $S
