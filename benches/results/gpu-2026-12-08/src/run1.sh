#!/usr/bin/env bash
# Run 1 of 2026-12-08 (one call, <= 10 min): (1) latprobe.cu: how fast the host learns
# that one small device operation is done, per way of waiting, without and with MPS
# (issue 18's p2p 8 B target sits below the cudaStreamSynchronize floor); (2) device
# point-to-point correctness with the 2026-12-07b receive path (run5.sh of
# gpu-2026-12-07, never run); (3) issue 18's table under MPS (on an H200 if one came);
# (4) without MPS, 6 alternations of allreduce 256 KiB - 4 MiB, this build vs base.
set -u
B=$PWD/.device-bin; BB=$B/base; D=benches/results/gpu-2026-12-08/src
O=${OUT:-/tmp/out}; mkdir -p $O/logs; S=$O/summary.txt
echo "build $(cat $B/REV), base $(cat $BB/REV)" > $S; nvidia-smi -L >> $S
t0=$SECONDS
left() { [ $((SECONDS - t0 + ${1:-0})) -lt ${RUN_LIMIT:-570} ]; }
step() { local n=$1 t=$2; shift 2
  if ! left $t; then echo "== $n skipped (time)" >> $S; return; fi
  timeout -k 5 $t "$@" > $O/logs/$n.log 2>&1; echo "== $n rc=$? $((SECONDS-t0)) s" >> $S; }
small() { grep -E "^(8|65536|1048576) " $O/logs/$1.log | awk '{printf "%s:%s ", $1, $2}' >> $S; echo >> $S; }
rows() { grep -E "^(8|67108864|268435456) " $O/logs/$1.log >> $S; }
nvcc -O2 -o /tmp/latprobe $D/latprobe.cu -lcuda > $O/logs/nvcc.log 2>&1 || { echo "nvcc failed" >> $S; cat $O/logs/nvcc.log >> $S; }
# 1. The probe without MPS.
for m in auto blocking; do step probe_nomps_$m 40 /tmp/latprobe $m; grep us $O/logs/probe_nomps_$m.log >> $S; done
# 2. Device p2p correctness (no MPS).
chk() { step $1 150 "${@:2}"; grep -E "checks|OK|FAIL|error" $O/logs/$1.log | tail -2 | cut -c1-200 >> $S; }
chk check env $B/rwrun -n 2 $B/rw-gpuapp check 16777216
chk check_noipc env RANKWIRE_CUDA_IPC=0 $B/rwrun -n 2 $B/rw-gpuapp check 4194304
chk check_tcp env RANKWIRE_TRANSPORTS=tcp RANKWIRE_CUDA_IPC=0 $B/rwrun -n 2 $B/rw-gpuapp check 4194304
# 3. MPS: the probe, then issue 18's table.
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
for m in auto spin; do step probe_mps_$m 40 /tmp/latprobe $m; grep us $O/logs/probe_mps_$m.log >> $S; done
for k in 1; do
  step p2p_mps_new_$k 60 $B/rwrun -n 2 $B/rankwire-bench latency -d cuda --max-size 1048576 -i 1000 --warmup 20; small p2p_mps_new_$k
  step p2p_mps_base_$k 60 $BB/rwrun -n 2 $BB/rankwire-bench latency -d cuda --max-size 1048576 -i 1000 --warmup 20; small p2p_mps_base_$k
done
step table2_mps 120 $B/rwrun -n 2 $B/rankwire-bench allreduce -d cuda --max-size 268435456 -i 300 --warmup 10; rows table2_mps
step table4_mps 150 $B/rwrun -n 4 $B/rankwire-bench allreduce -d cuda --max-size 268435456 -i 300 --warmup 10; rows table4_mps
step staged2_mps 150 env RANKWIRE_GPU_PEER=off $B/rwrun -n 2 $B/rankwire-bench allreduce -d cuda --max-size 268435456 -i 300 --warmup 10; rows staged2_mps
mps_stop
# 4. No MPS: allreduce 256 KiB - 4 MiB, new vs base alternated.
for k in 1 2 3 4 5 6; do
  for c in new base; do
    d=$B; [ $c = base ] && d=$BB
    left 40 || break 2
    timeout -k 5 40 $d/rwrun -n 2 $d/rankwire-bench allreduce -d cuda --min-size 262144 --max-size 4194304 -i 300 --warmup 10 > $O/logs/nomps_${c}_$k.log 2>&1
    echo "nomps $c $k: $(grep -E '^[0-9]+ ' $O/logs/nomps_${c}_$k.log | awk '{printf "%s:%s ", $1, $2}')" >> $S
  done
done
step p2p_nomps 60 $B/rwrun -n 2 $B/rankwire-bench latency -d cuda --max-size 65536 -i 200 --warmup 10; small p2p_nomps
echo "== total $((SECONDS-t0)) s" >> $S
tar czf $O/logs.tgz -C $O logs && rm -rf $O/logs
cat $S
