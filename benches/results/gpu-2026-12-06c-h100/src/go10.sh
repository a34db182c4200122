#!/usr/bin/env bash
set -u
export PATH=$PATH:/usr/local/cuda/bin
B=$PWD/.device-bin
O=${OUT:-/tmp/out}; mkdir -p $O/logs
S=$O/summary.txt
. scripts/mps.sh
mps_start; echo "mps: $? $MPS_WHY" > $S
timeout 200 python3 $B/peerk.py $B/peer_f32.cu 64,128,256,512,1024 plain,peer,noexit > $O/logs/peerk.log 2>&1; echo "rc=$?" >> $S
cat $O/logs/peerk.log | tail -40 >> $S
mps_stop
mps_start
timeout 120 $B/rwrun -n 2 $B/rankwire-bench latency -d cuda --max-size 4194304 -i 2000 --warmup 50 > $O/logs/p2p_latency_mps.log 2>&1; echo "== p2p_latency_mps rc=$?" >> $S; grep -v "^#" $O/logs/p2p_latency_mps.log | tail -25 >> $S
timeout 120 $B/rwrun -n 2 $B/rankwire-bench allreduce -d cuda --max-size 268435456 -i 1000 --warmup 20 > $O/logs/coll_bench_2_mps.log 2>&1; echo "== coll_bench_2_mps rc=$?" >> $S; tail -28 $O/logs/coll_bench_2_mps.log >> $S
mps_stop
tar czf $O/logs.tgz -C $O logs
