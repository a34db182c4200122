#!/usr/bin/env bash
# Device run of this stop (issues 20, 18): scripts/gpu-abi.sh on this build (its C tests include cancel_send.c and cancel_thread.c, wire version 3), then OSU's
# device-buffer latency, bandwidth and allreduce (the CUDA build gpu-abi.sh made) on this
# build's libmpi_abi.so.1 and on the parent's (f42e824, .device-bin/lib-base), alternated
# five times, under MPS.
set -u
export PATH=$PATH:/usr/local/cuda/bin
B=$PWD/.device-bin
O=${OUT:-/tmp/out}; mkdir -p $O/ab
S=$O/summary.txt
echo "build $(cat $B/REV)" > $S; nvidia-smi -L >> $S
t0=$SECONDS
# SKIP_ABI=1: the A/B only (OSU built by an earlier gpu-abi.sh on this machine).
if [ "${SKIP_ABI:-0}" != 1 ]; then
  timeout -k 5 420 scripts/gpu-abi.sh $O/abi > $O/abi-run.log 2>&1; echo "== gpu-abi rc=$? $((SECONDS-t0)) s" >> $S
  cat $O/abi/summary.txt >> $S 2>/dev/null
fi
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
# scripts/osu.sh --cuda with MPICC set builds in build-custom-cuda
D=target/osu/build-custom-cuda/c/mpi
# SKIP_AB=1: gpu-abi.sh and the Rust device check only (a call is limited to 600 s).
for k in $( [ "${SKIP_AB:-0}" = 1 ] || echo 1 2 3 4 5 ); do
  for v in new base; do
    L=$B/lib; [ $v = base ] && L=$B/lib-base
    for b in pt2pt/standard/osu_latency pt2pt/standard/osu_bw collective/blocking/osu_allreduce; do
      n=$(basename $b)
      # OSU 7.2 takes the buffer locations (D D) as the last arguments
      a="-m 1:1048576 -i 2000 -x 200 -d cuda D D"
      [ $n = osu_allreduce ] && a="-m 4:1048576 -i 2000 -x 200 -T mpi_float -d cuda"
      timeout -k 5 60 env LD_LIBRARY_PATH=$L $B/rwrun -n 2 $D/$b $a > $O/ab/${n}_${v}_$k.log 2>&1
      echo "== ${n}_${v}_$k rc=$?" >> $S
    done
  done
done
# The device collectives and point-to-point of the Rust API on this build (MPS).
timeout -k 5 200 $B/rwrun -n 2 $B/rw-gpucoll check > $O/gpucoll.log 2>&1; echo "== rw-gpucoll check (2 ranks, MPS) rc=$?" >> $S
tail -4 $O/gpucoll.log >> $S
mps_stop
python3 - $O/ab >> $S <<'PY'
import sys, glob, collections, statistics
d = collections.defaultdict(lambda: collections.defaultdict(list))
for f in glob.glob(sys.argv[1] + "/*.log"):
    n = f.split("/")[-1][:-4]; b, v, k = n.rsplit("_", 2)
    for line in open(f):
        p = line.split()
        if len(p) >= 2 and p[0].isdigit():
            try: d[(b, int(p[0]))][v].append(float(p[1]))
            except ValueError: pass
print("bench size new(median) base(median) new/base")
for (b, s) in sorted(d):
    r = d[(b, s)]
    if r["new"] and r["base"]:
        a, c = statistics.median(r["new"]), statistics.median(r["base"])
        print(f"{b} {s} {a:.2f} {c:.2f} {a/c:.3f}")
PY
tar czf $O/logs.tgz -C $O ab abi abi-run.log gpucoll.log 2>/dev/null
