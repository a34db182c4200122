#!/usr/bin/env bash
# Final GPU run of the session: more driver calls probed, the regression subset, 4 ranks old/new.
set -u
export PATH=$PATH:/usr/local/cuda/bin
B=$PWD/.device-bin
O=${OUT:-/tmp/out}; mkdir -p $O/r
S=$O/summary.txt
echo "build $(cat $B/REV)" > $S
nvcc -cubin -arch=sm_90 -o /tmp/empty.cubin $B/empty.cu > $O/r/nvcc.log 2>&1
nvcc -o /tmp/bp2 $B/blockprobe2.c -lcuda -lpthread >> $O/r/nvcc.log 2>&1
timeout 120 /tmp/bp2 /tmp/empty.cubin > $O/r/probe2.log 2>&1; echo "== probe2 rc=$?" >> $S; cat $O/r/probe2.log >> $S
. scripts/mps.sh
mps_start > /dev/null
for k in 1 2; do for v in old new; do
  bin=$B/rankwire-bench; [ $v = old ] && bin=$B/rankwire-bench-old
  timeout 100 $B/rwrun -n 4 $bin allreduce -d cuda --max-size 4194304 -i 2000 --warmup 50 > $O/r/four_${v}_$k.log 2>&1; echo "== four_${v}_$k rc=$?" >> $S
done; done
mps_stop
python3 - "$O/r" >> $S <<'PY'
import sys, glob, collections
d = collections.defaultdict(dict)
for f in sorted(glob.glob(sys.argv[1] + "/four_*.log")):
    name = f.split("/")[-1][5:-4]
    for line in open(f):
        p = line.split()
        if p and p[0].isdigit() and len(p) >= 2: d[int(p[0])][name] = float(p[1])
names = sorted({n for r in d.values() for n in r})
print("4 ranks MPS: size " + " ".join(names) + " new/old(mean)")
for s in sorted(d):
    r = d[s]; o = [r[n] for n in names if n.startswith("old")]; w = [r[n] for n in names if n.startswith("new")]
    print(f"{s} " + " ".join(f"{r.get(n, float('nan')):.2f}" for n in names) + f" {(sum(w)/len(w))/(sum(o)/len(o)):.3f}")
PY
GPU_CHECK_MAX=16777216 GPU_COLL_MAX=16777216 GPU_COLL_BENCH_MAX=1073741824 \
GPU_ONLY='^(check|reuse|stream_p2p|p2p_latency|coll_check_2|coll_peer_forced_2|coll_bench_2|stream_p2p_mps|coll_check_2_mps|coll_check_4_mps|coll_peer_4_mps|p2p_latency_mps|coll_bench_2_mps)$' \
  timeout 420 bash scripts/gpu-run.sh $O/r/gpu > $O/r/gpu-run.console 2>&1
echo "== gpu-run rc=$?" >> $S
cat $O/r/gpu/summary.txt >> $S
tar czf $O/r.tgz -C $O r
