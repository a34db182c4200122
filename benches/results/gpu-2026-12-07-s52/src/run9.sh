#!/usr/bin/env bash
# GPU call 9 of 2026-12-07 (session 52, < 5 min): before/after of the device paths in one
# run. .device-bin = this stop's final build, .device-bin/base = e9d6b60 (the stop's
# parent; rankwire-bench and rwrun only). Alternated launches, new then base, twice,
# without MPS and with MPS: allreduce -d cuda 4 B - 64 MiB (no MPS) / 256 MiB (MPS) at 2
# ranks, latency -d cuda 0 B - 1 MiB. Then the final build's rw-gpucoll check and peer at
# 2 ranks under MPS (the blocking allreduce bodies were merged after call 8).
set -u
B=$PWD/.device-bin; BB=$B/base; O=${OUT:-/tmp/out}; mkdir -p $O/logs; S=$O/summary.txt
echo "build $(cat $B/REV), base $(cat $BB/REV)" > $S; nvidia-smi -L >> $S; t0=$SECONDS
run() { local n=$1 t=$2; shift 2; timeout -k 5 $t "$@" > $O/logs/$n.log 2>&1; echo "== $n rc=$? $((SECONDS-t0)) s" >> $S
  grep -E "rw-gpucoll (check|peer):|FAIL|failed|differs" $O/logs/$n.log | tail -2 | cut -c1-200 >> $S; }
pass() { local s=$1 max=$2
  for i in 1 2; do
    for v in new base; do
      d=$B; [ $v = base ] && d=$BB
      run ar_${v}_$i$s 150 $d/rwrun -n 2 $d/rankwire-bench allreduce -d cuda --max-size $max -i 200 --warmup 10
      run lat_${v}_$i$s 100 $d/rwrun -n 2 $d/rankwire-bench latency -d cuda --max-size 1048576 -i 500 --warmup 20
    done
  done; }
pass "" 67108864
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
pass _mps 268435456
run check_2_mps 150 $B/rwrun -n 2 $B/rw-gpucoll check 4194304
run peer_2_mps 120 $B/rwrun -n 2 $B/rw-gpucoll peer 4194304
mps_stop
tar czf $O/logs.tgz -C $O logs && rm -rf $O/logs
cat $S
