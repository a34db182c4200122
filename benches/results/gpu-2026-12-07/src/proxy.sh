#!/usr/bin/env bash
# The stream proxy's hangs of gpu-2026-12-06k, reproduced with `rw-gpuapp proxyring`
# (send_device_on_stream / recv_device_on_stream in a ring between user kernels,
# buffers made and freed every round), each case under `timeout`, one PASS/FAIL line
# each in $OUT/summary.txt (logs in $OUT/logs.tgz). Binaries from scripts/gpu-build.sh
# in .device-bin/; run from the repository root. With an argument `probe`, parkprobe.c
# (the driver-level probe of this directory) runs first (needs nvcc).
#
# Expected with the release gate (gpu/src/release.rs) and nothing else:
#   - no MPS, one stream in blocking order and two streams: PASS (hung before: a free
#     of the previous round waited in the driver for a parked stream and held the
#     proxy's copies and events);
#   - MPS, one stream: PASS; MPS, two streams: FAIL (known: under MPS a process gets
#     two hardware work queues, so two streams parked on their flags hold the runtime
#     stream's CUDA IPC copy; parkprobe test A); the same with
#     CUDA_DEVICE_MAX_CONNECTIONS=32: PASS.
set -u
B=$PWD/.device-bin
O=${OUT:-/tmp/out}; mkdir -p $O
S=$O/summary.txt
echo "build $(cat $B/REV 2>/dev/null || echo '?')" > $S; nvidia-smi -L >> $S
D=benches/results/gpu-2026-12-07/src
if [ "${1:-}" = probe ]; then
  export PATH=$PATH:/usr/local/cuda/bin
  if nvcc -o /tmp/parkprobe $D/parkprobe.c -lcuda -lpthread > $O/nvcc.log 2>&1; then
    timeout -k 5 150 /tmp/parkprobe ABC > $O/probe_nomps.log 2>&1
    echo "== parkprobe, no MPS: rc=$? (results in probe_nomps.log)" >> $S
  else
    echo "== parkprobe: nvcc failed (nvcc.log)" >> $S
  fi
fi
t0=$SECONDS
case_() { # name ranks timeout env... -- the ring's environment
  local name=$1 n=$2 t=$3; shift 3
  timeout -k 5 $t env "$@" $B/rwrun -n $n $B/rw-gpuapp proxyring > $O/$name.log 2>&1
  local rc=$? ok
  ok=$(grep -c "proxyring OK" $O/$name.log)
  if [ $rc = 0 ] && [ "$ok" = "$n" ]; then v=PASS; else v=FAIL; fi
  echo "$v $name (rc=$rc, $ok of $n ranks OK, $((SECONDS-t0)) s)" >> $S
  grep -E "proxy ring|WARN|wrong|error" $O/$name.log | cut -c1-300 | head -12 >> $S
}
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
case_ mps_2r_serial 2 60 RW_CH_SERIAL=1 RW_CH_SIZES=8,65536,8388608
case_ mps_2r_2streams 2 45 RW_CH_SIZES=8,65536,8388608
case_ mps_2r_2streams_conn32 2 60 CUDA_DEVICE_MAX_CONNECTIONS=32 RW_CH_SIZES=8,65536,8388608
case_ mps_4r_2streams_conn32 4 60 CUDA_DEVICE_MAX_CONNECTIONS=32 RW_CH_SIZES=8,8388608
timeout -k 5 60 $B/rwrun -n 2 $B/rw-gpuapp streamp2p > $O/mps_streamp2p.log 2>&1
echo "$([ $? = 0 ] && echo PASS || echo FAIL) mps_streamp2p (regression)" >> $S
grep "one way" $O/mps_streamp2p.log | head -6 >> $S
mps_stop
case_ nomps_2r_serial 2 90 RW_CH_SERIAL=1 RW_CH_SIZES=8,65536,8388608
case_ nomps_2r_2streams 2 90 RW_CH_SIZES=8,65536,8388608
case_ nomps_4r_serial 4 90 RW_CH_SERIAL=1 RW_CH_SIZES=8,65536
timeout -k 5 90 $B/rwrun -n 2 $B/rw-gpuapp streamp2p > $O/nomps_streamp2p.log 2>&1
echo "$([ $? = 0 ] && echo PASS || echo FAIL) nomps_streamp2p (regression)" >> $S
grep "one way" $O/nomps_streamp2p.log | head -6 >> $S
echo "== total $((SECONDS-t0)) s" >> $S
tar czf $O/logs.tgz -C $O $(cd $O && ls *.log) && rm -f $O/*.log
cat $S
