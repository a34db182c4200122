#!/usr/bin/env bash
# Session 2026-12-06c: stream-ordered ping-pong per count, and the large device allreduce.
set -u
export PATH=$PATH:/usr/local/cuda/bin
B=$PWD/.device-bin
O=${OUT:-/tmp/out}; mkdir -p $O/logs
S=$O/summary.txt
. scripts/mps.sh
st() { # name timeout cmd...
  local n=$1 t=$2; shift 2
  local t0=$(date +%s.%N)
  timeout -k 5 $t "$@" > $O/logs/$n.log 2>&1; local rc=$?
  local t1=$(date +%s.%N)
  echo "== $n rc=$rc $(echo "$t1 - $t0" | bc) s" >> $S
  grep -E "one way|enqueued|stream-ordered point|error|Error|^ *[0-9]+ |bound|copy bandwidth|ok$" $O/logs/$n.log | tail -40 >> $S
  pkill -9 -f rw-gpuapp 2>/dev/null; pkill -9 -f rankwire-bench 2>/dev/null; true
}
nvidia-smi -L > $S; which nsys ncu >> $S 2>&1
echo "build $(cat $B/REV 2>/dev/null)" >> $S
st sp_small 60 env RW_STREAM_ITERS=2,20,200 $B/rwrun -n 2 $B/rw-gpuapp streamp2p
mps_start; echo "mps: $? $MPS_WHY" >> $S
st sp_small_mps 60 env RW_STREAM_ITERS=2,20,200 $B/rwrun -n 2 $B/rw-gpuapp streamp2p
st sp_2000_mps 60 env RW_STREAM_ITERS=2000 $B/rwrun -n 2 $B/rw-gpuapp streamp2p
st ar_sweep_mps 120 $B/rwrun -n 2 $B/rankwire-bench allreduce -d cuda --min-size 67108864 --max-size 1073741824 -i 1000 --warmup 20
st ar_512only_mps 60 $B/rwrun -n 2 $B/rankwire-bench allreduce -d cuda --min-size 536870912 --max-size 536870912 -i 1000 --warmup 20
st ar_nopeer_mps 120 env RANKWIRE_GPU_PEER=off $B/rwrun -n 2 $B/rankwire-bench allreduce -d cuda --min-size 134217728 --max-size 1073741824 -i 1000 --warmup 20
st ar_1rank 60 $B/rwrun -n 1 $B/rankwire-bench allreduce -d cuda --min-size 134217728 --max-size 1073741824 -i 1000 --warmup 20
cat > /tmp/k.py <<'PY'
import cupy as cp, sys
k = cp.RawKernel(r'''
extern "C" __global__ void two(const float4* a, const float4* b, float4* c, float4* d, unsigned long long n) {
  for (unsigned long long i = blockIdx.x*(unsigned long long)blockDim.x+threadIdx.x; i < n; i += (unsigned long long)gridDim.x*blockDim.x) {
    float4 x = a[i], y = b[i]; float4 z = make_float4(x.x+y.x, x.y+y.y, x.z+y.z, x.w+y.w); c[i] = z; d[i] = z; }
}''', 'two')
for mib in (64, 128, 256, 384, 512, 768, 1024):
    n = mib << 20
    a = cp.ones(n//4, cp.float32); b = cp.ones(n//4, cp.float32); c = cp.empty_like(a); d = cp.empty_like(a)
    nv = n // 16
    for blocks in (132, 264):
        for _ in range(3): k((blocks,), (512,), (a, b, c, d, cp.uint64(nv)))
        e0 = cp.cuda.Event(); e1 = cp.cuda.Event(); e0.record()
        for _ in range(10): k((blocks,), (512,), (a, b, c, d, cp.uint64(nv)))
        e1.record(); e1.synchronize()
        t = cp.cuda.get_elapsed_time(e0, e1) / 10 * 1e3
        print(f"{mib} MiB blocks {blocks}: {t:.1f} us, {4*n/t/1e3:.0f} GB/s (2 reads + 2 writes)")
    del a, b, c, d
PY
st cupy_4buf 120 python3 /tmp/k.py
cat $O/logs/cupy_4buf.log >> $S
mps_stop
st ar_sweep_nomps 120 $B/rwrun -n 2 $B/rankwire-bench allreduce -d cuda --min-size 134217728 --max-size 1073741824 -i 1000 --warmup 20
tar czf $O/logs.tgz -C $O logs
