#!/usr/bin/env bash
# Device run 2 of this stop (issue 18): the node-aware device allreduce's final form on
# fake nodes (RANKWIRE_TEST_GPU_HIER_SPLIT=2) on one GPU, without and with MPS; the peer
# test last, with the peer kernels' timeout at 60 s so a hang ends with a message.
set -u
export PATH=$PATH:/usr/local/cuda/bin
B=$PWD/.device-bin
O=${OUT:-/tmp/out}; mkdir -p $O/h
S=$O/summary.txt
echo "build $(cat $B/REV)" > $S; nvidia-smi -L >> $S
st() { local n=$1 t=$2; shift 2; local t0=$SECONDS
  timeout -k 5 $t "$@" > $O/h/$n.log 2>&1; local rc=$?
  echo "== $n rc=$rc $((SECONDS-t0)) s" >> $S
  grep -E "node-aware|^# rw-gpucoll|checks|FAIL|rror|timed out|timeout" $O/h/$n.log | sort | uniq -c | head -8 >> $S
  pkill -9 -f rw-gpu 2>/dev/null; true; }
export RANKWIRE_LOG=rankwire=info RANKWIRE_GPU_PEER_TIMEOUT=60
st hier_check_4 150 env RANKWIRE_TEST_GPU_HIER_SPLIT=2 $B/rwrun -n 4 $B/rw-gpucoll check 4194304
st hier_peer_4 150 env RANKWIRE_TEST_GPU_HIER_SPLIT=2 $B/rwrun -n 4 $B/rw-gpucoll peer 1048576
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
st hier_check_4_mps 150 env RANKWIRE_TEST_GPU_HIER_SPLIT=2 $B/rwrun -n 4 $B/rw-gpucoll check 16777216
st hier_check_3_mps 150 env RANKWIRE_TEST_GPU_HIER_SPLIT=2 $B/rwrun -n 3 $B/rw-gpucoll check 4194304
unset RANKWIRE_LOG
for v in flat hier; do
  e=""; [ $v = hier ] && e="RANKWIRE_TEST_GPU_HIER_SPLIT=2"
  timeout -k 5 120 env $e $B/rwrun -n 4 $B/rankwire-bench allreduce -d cuda --max-size 67108864 -i 500 --warmup 20 > $O/h/bench_$v.log 2>&1; echo "== bench_$v rc=$?" >> $S
done
paste <(grep -E "^[0-9]" $O/h/bench_flat.log | awk '{print $1, $2}') <(grep -E "^[0-9]" $O/h/bench_hier.log | awk '{print $2}') | awk '{printf "%s flat %s hier %s ratio %.2f\n", $1, $2, $3, $3/$2}' >> $S
export RANKWIRE_LOG=rankwire=info
st hier_peer_4_mps 150 env RANKWIRE_TEST_GPU_HIER_SPLIT=2 $B/rwrun -n 4 $B/rw-gpucoll peer 1048576
st flat_peer_4_mps 150 $B/rwrun -n 4 $B/rw-gpucoll peer 1048576
mps_stop
tar czf $O/h.tgz -C $O h
