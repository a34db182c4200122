#!/usr/bin/env bash
# Follow-up on the same warm H100: no-MPS allreduce new vs base alternated (1 MiB looked 1.38x
# slower in one run), and the 4-rank two-stream proxy with a fresh MPS daemon.
set -u
B=$PWD/.device-bin; BB=$B/base
O=${OUT:-/tmp/out}; mkdir -p $O/logs; S=$O/summary.txt
echo "build $(cat $B/REV), base $(cat $BB/REV)" > $S
t0=$SECONDS
for k in 1 2 3; do
  for c in new base; do
    d=$B; [ $c = base ] && d=$BB
    timeout -k 5 40 $d/rwrun -n 2 $d/rankwire-bench allreduce -d cuda --min-size 262144 --max-size 4194304 -i 300 --warmup 10 > $O/logs/nomps_${c}_$k.log 2>&1
    echo "nomps $c $k: $(grep -E '^(262144|1048576|4194304) ' $O/logs/nomps_${c}_$k.log | awk '{printf "%s:%s ", $1, $2}')" >> $S
  done
done
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
timeout -k 5 60 env CUDA_DEVICE_MAX_CONNECTIONS=32 RW_CH_SIZES=8,8388608 $B/rwrun -n 4 $B/rw-gpuapp proxyring > $O/logs/px4.log 2>&1; echo "px_mps_4r_2streams_c32 rc=$? ok=$(grep -c 'proxyring OK' $O/logs/px4.log)" >> $S
grep -E "FAILED|error" $O/logs/px4.log | head -3 | cut -c1-240 >> $S
mps_stop
echo "== total $((SECONDS-t0)) s" >> $S
tar czf $O/logs.tgz -C $O logs && rm -rf $O/logs
cat $S
