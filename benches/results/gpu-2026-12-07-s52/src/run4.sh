#!/usr/bin/env bash
# GPU call 4 of 2026-12-07 (session 52, < 10 min): issue 18's whole table in one run,
# without MPS and then with MPS: device point-to-point one way (blocking calls:
# rankwire-bench latency -d cuda; stream-ordered: rw-gpuapp channels' 8-byte ping-pong
# between kernels), allreduce at 2 ranks (auto: peer memory where usable; and the
# host-staged path, RANKWIRE_GPU_PEER=off) and at 4 ranks, 8 B to 256 MiB.
# Output: $OUT/summary.txt (the rows the issue names), $OUT/logs.tgz (full tables).
set -u
B=$PWD/.device-bin; O=${OUT:-/tmp/out}; mkdir -p $O/logs; S=$O/summary.txt
echo "build $(cat $B/REV)" > $S; nvidia-smi -L >> $S; t0=$SECONDS
run() { local n=$1 t=$2; shift 2; timeout -k 5 $t "$@" > $O/logs/$n.log 2>&1; echo "== $n rc=$? $((SECONDS-t0)) s" >> $S; }
rows() { grep -E "^($2) " $O/logs/$1.log | awk -v n=$1 '{print n, $1, $2}' >> $S; }
AR="$B/rankwire-bench allreduce -d cuda --max-size 268435456 -i 200 --warmup 10"
pass() { local s=$1
  run lat$s 120 $B/rwrun -n 2 $B/rankwire-bench latency -d cuda --max-size 1048576 -i 1000 --warmup 50; rows lat$s "8|65536|1048576"
  run ch2$s 60 env RW_STREAM_ITERS=20,2000 $B/rwrun -n 2 $B/rw-gpuapp channels; grep -E "ping-pong" $O/logs/ch2$s.log | tail -2 | cut -c1-160 >> $S
  run ar2$s 200 $B/rwrun -n 2 $AR; rows ar2$s "8|1048576|67108864|268435456"
  run ar2_staged$s 200 env RANKWIRE_GPU_PEER=off $B/rwrun -n 2 $AR; rows ar2_staged$s "8|1048576|67108864|268435456"
  run ar4$s 200 $B/rwrun -n 4 $AR; rows ar4$s "8|1048576|67108864|268435456"
  grep -h "device copy bandwidth" $O/logs/ar2$s.log | head -1 >> $S; }
pass ""
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
pass _mps
mps_stop
tar czf $O/logs.tgz -C $O logs && rm -rf $O/logs
cat $S
