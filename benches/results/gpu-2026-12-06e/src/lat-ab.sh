#!/usr/bin/env bash
# Device run 4: osu_latency -d cuda D D at 1-64 B, this build's library against the
# parent's, alternated nine times under MPS (the small rows of run-2 read 1.04-1.06).
set -u
B=$PWD/.device-bin
O=${OUT:-/tmp/out}; mkdir -p $O/lat
S=$O/summary.txt
echo "build $(cat $B/REV)" > $S
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
D=target/osu/build-custom-cuda/c/mpi/pt2pt/standard/osu_latency
for k in $(seq 1 9); do
  for v in new base; do
    L=$B/lib; [ $v = base ] && L=$B/lib-base
    timeout -k 5 60 env LD_LIBRARY_PATH=$L $B/rwrun -n 2 $D -m 1:64 -i 5000 -x 500 -d cuda D D > $O/lat/${v}_$k.log 2>&1
    echo "== ${v}_$k rc=$?" >> $S
  done
done
mps_stop
python3 - $O/lat >> $S <<'PY'
import sys, glob, collections, statistics
d = collections.defaultdict(lambda: collections.defaultdict(list))
for f in glob.glob(sys.argv[1] + "/*.log"):
    v = f.split("/")[-1].split("_")[0]
    for line in open(f):
        p = line.split()
        if len(p) >= 2 and p[0].isdigit():
            d[int(p[0])][v].append(float(p[1]))
print("size new(median) base(median) new/base new(min) base(min)")
for s in sorted(d):
    a, c = d[s]["new"], d[s]["base"]
    print(f"{s} {statistics.median(a):.2f} {statistics.median(c):.2f} {statistics.median(a)/statistics.median(c):.3f} {min(a):.2f} {min(c):.2f}")
PY
