#!/usr/bin/env bash
# Run 2 of 2026-12-07 (one call, <= 10 min): the done word of the peer kernels, the
# stream proxy's hang cases after the release gate (two streams under MPS: the known
# limit, then with CUDA_DEVICE_MAX_CONNECTIONS=32),
# and issue 18's figures in one run, with and without MPS. Binaries: .device-bin/
# (this build) and .device-bin/base/ (8a0058d, the last stop). Steps run in order of
# importance; a step that could end after 575 s is skipped (said in summary.txt).
set -u
B=$PWD/.device-bin; BB=$B/base
O=${OUT:-/tmp/out}; mkdir -p $O/logs
S=$O/summary.txt
echo "build $(cat $B/REV), base $(cat $BB/REV)" > $S; nvidia-smi -L >> $S
t0=$SECONDS
left() { [ $((SECONDS - t0 + ${1:-0})) -lt ${RUN_LIMIT:-575} ]; }
step() { # step NAME TIMEOUT CMD...
  local n=$1 t=$2; shift 2
  if ! left $t; then echo "== $n skipped (time)" >> $S; return; fi
  timeout -k 5 $t "$@" > $O/logs/$n.log 2>&1; local rc=$?
  echo "== $n rc=$rc $((SECONDS-t0)) s" >> $S
}
small() { grep -E "^(4|8|64|1024|8192|65536|1048576) " $O/logs/$1.log | awk '{printf "%s:%s ", $1, $2}' >> $S; echo >> $S; }
proxy() { # proxy NAME RANKS TIMEOUT env...
  local n=$1 r=$2 t=$3; shift 3
  step $n $t env "$@" $B/rwrun -n $r $B/rw-gpuapp proxyring
  local ok; ok=$(grep -c "proxyring OK" $O/logs/$n.log 2>/dev/null)
  echo "   $([ "$ok" = "$r" ] && echo PASS || echo FAIL) $n ($ok of $r ranks OK)" >> $S
  grep -E "WARN|wrong|error|FAILED" $O/logs/$n.log 2>/dev/null | cut -c1-240 | head -4 >> $S
}
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
# 1. Correctness of the peer path with the done word (up to 256 KiB: the direct path).
step check2_mps 60 $B/rwrun -n 2 $B/rw-gpucoll check 262144
grep -E "checks|FAIL|peer" $O/logs/check2_mps.log | tail -3 >> $S
# 2. Small allreduce, new vs base, alternated (MPS, 2 ranks), and where the time goes.
for k in 1 2; do
  step ar_new_$k 40 $B/rwrun -n 2 $B/rankwire-bench allreduce -d cuda --max-size 65536 -i 2000 --warmup 50; small ar_new_$k
  step ar_base_$k 40 $BB/rwrun -n 2 $BB/rankwire-bench allreduce -d cuda --max-size 65536 -i 2000 --warmup 50; small ar_base_$k
  [ $k = 1 ] && { step phases2_mps 40 $B/rwrun -n 2 $B/rw-gpuapp collphases; grep "allreduce 8 B" $O/logs/phases2_mps.log >> $S; }
  [ $k = 1 ] && proxy px_mps_2r_2streams 2 45 RW_CH_SIZES=8,65536,8388608
done
proxy px_mps_2r_2streams_c32 2 45 CUDA_DEVICE_MAX_CONNECTIONS=32 RW_CH_SIZES=8,65536,8388608
step peer4_mps 120 $B/rwrun -n 4 $B/rw-gpucoll peer 4194304
grep -E "checks|FAIL" $O/logs/peer4_mps.log | tail -2 >> $S
step phases4_mps 60 $B/rwrun -n 4 $B/rw-gpuapp collphases; grep "allreduce 8 B" $O/logs/phases4_mps.log >> $S
# 3. The stream proxy (MPS), more cases.
proxy px_mps_2r_serial 2 45 RW_CH_SERIAL=1 RW_CH_SIZES=8,65536,8388608
proxy px_mps_4r_2streams_c32 4 60 CUDA_DEVICE_MAX_CONNECTIONS=32 RW_CH_SIZES=8,8388608
step streamp2p_mps 60 $B/rwrun -n 2 $B/rw-gpuapp streamp2p; grep "one way" $O/logs/streamp2p_mps.log | head -3 >> $S
# 4. Issue 18's table (MPS): device allreduce, host-staged path, p2p, channels.
step table2_mps 120 $B/rwrun -n 2 $B/rankwire-bench allreduce -d cuda --max-size 268435456 -i 300 --warmup 10
grep -E "^(8|67108864|268435456) " $O/logs/table2_mps.log >> $S
step table4_mps 150 $B/rwrun -n 4 $B/rankwire-bench allreduce -d cuda --max-size 268435456 -i 300 --warmup 10
grep -E "^(8|67108864|268435456) " $O/logs/table4_mps.log >> $S
step p2p_mps 60 $B/rwrun -n 2 $B/rankwire-bench latency -d cuda --max-size 1048576 -i 1000 --warmup 20; small p2p_mps
step ch2_mps 60 env RW_STREAM_ITERS=2000,20000 RW_CH_SIZES=8,65536 $B/rwrun -n 2 $B/rw-gpuapp channels; grep "one way" $O/logs/ch2_mps.log >> $S
step staged2_mps 150 env RANKWIRE_GPU_PEER=off $B/rwrun -n 2 $B/rankwire-bench allreduce -d cuda --max-size 268435456 -i 300 --warmup 10
grep -E "^(8|67108864|268435456) " $O/logs/staged2_mps.log >> $S
mps_stop
# 5. Without MPS: the proxy's no-MPS hangs, allreduce new vs base.
proxy px_nomps_2r_serial 2 90 RW_CH_SERIAL=1 RW_CH_SIZES=8,65536,8388608
proxy px_nomps_2r_2streams 2 90 RW_CH_SIZES=8,65536,8388608
step ar_nomps_new 60 $B/rwrun -n 2 $B/rankwire-bench allreduce -d cuda --max-size 1048576 -i 300 --warmup 10; small ar_nomps_new
step ar_nomps_base 60 $BB/rwrun -n 2 $BB/rankwire-bench allreduce -d cuda --max-size 1048576 -i 300 --warmup 10; small ar_nomps_base
step p2p_nomps 60 $B/rwrun -n 2 $B/rankwire-bench latency -d cuda --max-size 65536 -i 200 --warmup 10; small p2p_nomps
echo "== total $((SECONDS-t0)) s" >> $S
tar czf $O/logs.tgz -C $O logs && rm -rf $O/logs
cat $S
