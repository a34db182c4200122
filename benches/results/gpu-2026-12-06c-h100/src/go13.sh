#!/usr/bin/env bash
set -u
export PATH=$PATH:/usr/local/cuda/bin
B=$PWD/.device-bin
O=${OUT:-/tmp/out}; mkdir -p $O/logs
S=$O/summary.txt
. scripts/mps.sh
mps_start; echo "mps: $? $MPS_WHY" > $S
nvidia-smi -L >> $S
timeout 100 python3 $B/peerk.py $B/peer_f32_new.cu 64,1024 peer,peerH > $O/logs/peerk_v2.log 2>&1; echo "== peerk old rc=$?" >> $S; tail -5 $O/logs/peerk_v2.log >> $S
for k in 1 2; do
  for v in old new; do
    bin=$B/rankwire-bench; [ $v = old ] && bin=$B/rankwire-bench-old
    timeout 150 $B/rwrun -n 2 $bin allreduce -d cuda --max-size 1073741824 -i 1000 --warmup 20 > $O/logs/ar_${v}_$k.log 2>&1
    echo "== ar_${v}_$k rc=$?" >> $S
  done
done
for v in old new; do
  bin=$B/rankwire-bench; [ $v = old ] && bin=$B/rankwire-bench-old
  timeout 150 $B/rwrun -n 4 $bin allreduce -d cuda --max-size 268435456 -i 1000 --warmup 20 > $O/logs/four_${v}.log 2>&1
  echo "== four_${v} rc=$?" >> $S
done
timeout 100 $B/rwrun -n 2 $B/rw-gpucoll peer > $O/logs/coll_peer_2_mps.log 2>&1; echo "== coll_peer_2_mps rc=$?" >> $S; tail -2 $O/logs/coll_peer_2_mps.log >> $S
timeout 100 $B/rwrun -n 4 $B/rw-gpucoll peer > $O/logs/coll_peer_4_mps.log 2>&1; echo "== coll_peer_4_mps rc=$?" >> $S; tail -2 $O/logs/coll_peer_4_mps.log >> $S
python3 - "$O/logs" >> $S <<'PY'
import sys, glob, collections
d = collections.defaultdict(dict)
for f in sorted(glob.glob(sys.argv[1] + "/ar_*.log") + glob.glob(sys.argv[1] + "/four_*.log")):
    name = f.split("/")[-1][:-4].replace("ar_", "")
    for line in open(f):
        p = line.split()
        if p and p[0].isdigit() and len(p) >= 2: d[int(p[0])][name] = float(p[1])
names = sorted({n for r in d.values() for n in r})
print("size " + " ".join(names) + " new/old(median)")
for s in sorted(d):
    r = d[s]; o = sorted(r[n] for n in names if n.startswith("old")); w = sorted(r[n] for n in names if n.startswith("new"))
    ratio = (sum(w)/len(w)) / (sum(o)/len(o)) if o and w else float("nan")
    print(f"{s} " + " ".join(f"{r.get(n, float('nan')):.2f}" for n in names) + f" {ratio:.3f}")
PY
mps_stop
tar czf $O/logs.tgz -C $O logs
