#!/usr/bin/env bash
# GPU call 4 of session 54 (< 4 min): recheck of call 3's flagged row (MPS device latency, 1.12),
# with the order alternated: base first in odd rounds, new first in even ones; six rounds of
# latency -d cuda 0 B - 64 KiB (-i 2000) and allreduce -d cuda 4 B - 64 KiB
# (-i 500), 2 ranks under MPS. .device-bin = 04b605e (b48326c code), .device-bin/base = 9eae4a1.
set -u
B=$PWD/.device-bin; BB=$B/base; O=${OUT:-/tmp/out}; mkdir -p $O/logs; S=$O/summary.txt
echo "build $(cat $B/REV), base $(cat $BB/REV)" > $S; nvidia-smi -L >> $S; t0=$SECONDS
run() { local n=$1 t=$2; shift 2; timeout -k 5 $t "$@" > $O/logs/$n.log 2>&1; echo "== $n rc=$? $((SECONDS-t0)) s" >> $S
  awk '$1=="8" || $1=="65536" {printf "  %s B: %s us\n", $1, $2}' $O/logs/$n.log >> $S; }
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
for i in 1 2 3 4 5 6; do
  order="new base"; [ $((i % 2)) = 1 ] && order="base new"
  for v in $order; do
    d=$B; [ $v = base ] && d=$BB
    run lat_${v}_${i}_mps 100 $d/rwrun -n 2 $d/rankwire-bench latency -d cuda --max-size 65536 -i 2000 --warmup 100
    run ar_${v}_${i}_mps 100 $d/rwrun -n 2 $d/rankwire-bench allreduce -d cuda --max-size 65536 -i 500 --warmup 20
  done
done
mps_stop
tar czf $O/logs.tgz -C $O logs && rm -rf $O/logs
cat $S
