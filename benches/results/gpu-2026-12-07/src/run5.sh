#!/usr/bin/env bash
# Device point-to-point correctness with this stop's receive path (Protocol::irecv's one
# slab write, the shm round robin): rw-gpuapp check over CUDA IPC, staged through shm,
# and over TCP, without MPS (correctness only). Then no-MPS device allreduce new vs base,
# 8 alternations at 256 KiB - 4 MiB (run 2 and 3 had slow launches only in the new build).
set -u
B=$PWD/.device-bin
O=${OUT:-/tmp/out}; mkdir -p $O/logs; S=$O/summary.txt
echo "build $(cat $B/REV)" > $S
t0=$SECONDS
run() { local n=$1; shift; timeout -k 5 150 "$@" > $O/logs/$n.log 2>&1; echo "== $n rc=$? $((SECONDS-t0)) s: $(grep -E 'checks|OK|FAIL' $O/logs/$n.log | tail -1 | cut -c1-200)" >> $S; }
run check env $B/rwrun -n 2 $B/rw-gpuapp check 16777216
run check_noipc env RANKWIRE_CUDA_IPC=0 $B/rwrun -n 2 $B/rw-gpuapp check 4194304
run check_tcp env RANKWIRE_TRANSPORTS=tcp RANKWIRE_CUDA_IPC=0 $B/rwrun -n 2 $B/rw-gpuapp check 4194304
BB=$B/base
for k in 1 2 3 4 5 6 7 8; do
  for c in new base; do
    d=$B; [ $c = base ] && d=$BB
    timeout -k 5 40 $d/rwrun -n 2 $d/rankwire-bench allreduce -d cuda --min-size 262144 --max-size 4194304 -i 300 --warmup 10 > $O/logs/nomps_${c}_$k.log 2>&1
    echo "nomps $c $k: $(grep -E '^[0-9]+ ' $O/logs/nomps_${c}_$k.log | awk '{printf "%s:%s ", $1, $2}')" >> $S
  done
done
echo "== total $((SECONDS-t0)) s" >> $S
tar czf $O/logs.tgz -C $O logs && rm -rf $O/logs
cat $S
