#!/usr/bin/env bash
set -u
export PATH=$PATH:/usr/local/cuda/bin
B=$PWD/.device-bin
O=${OUT:-/tmp/out}; mkdir -p $O/logs
S=$O/summary.txt
. scripts/mps.sh
mps_start; echo "mps: $? $MPS_WHY" > $S
for sz in 268435456 1073741824; do
  nvidia-smi dmon -s um -d 1 > $O/logs/dmon_$sz.log 2>&1 &
  DM=$!
  RANKWIRE_LOG=rankwire::coll::device_peer=debug timeout 120 $B/rwrun -n 2 $B/rankwire-bench allreduce -d cuda --min-size $sz --max-size $sz -i 100 --warmup 5 > $O/logs/ar_$sz.log 2>&1
  echo "== ar_$sz rc=$?" >> $S
  kill $DM
  grep -v DEBUG $O/logs/ar_$sz.log | tail -3 >> $S
  grep DEBUG $O/logs/ar_$sz.log | head -4 >> $S; grep DEBUG $O/logs/ar_$sz.log | tail -4 >> $S
  cat $O/logs/dmon_$sz.log >> $S
done
mps_stop
