#!/usr/bin/env bash
# Device run of stop 45: this build (revocation of a collective context after a count
# mismatch, wire version 4; smaller receive request slots) against the parent's
# (cb2009e, .device-bin/prev: rwrun, rankwire-bench, libmpi_abi.so.1).
#  1. cancel_thread.c / cancel_send.c timed on this build (the engine-lock handoff of
#     stop 44, never timed on a GPU machine: before it they took 31 s and 122 s there);
#  2. coll_revoke.c at 2 and 4 ranks on this build;
#  3. device point-to-point one way (rankwire-bench latency -d cuda, 1 B - 1 MiB: the
#     CUDA IPC pull path, whose request state shrank) and device allreduce, this build
#     and the parent's alternated 3 times, under MPS;
#  4. rw-gpucoll check (2 ranks, MPS);
#  5. scripts/gpu-abi.sh (GPU_ABI_QUICK=1 unless FULL_ABI=1; it starts MPS itself).
set -u
export PATH=$PATH:/usr/local/cuda/bin
B=$PWD/.device-bin
P=$B/prev
O=${OUT:-/tmp/out}; mkdir -p $O/ab
S=$O/summary.txt
echo "build $(cat $B/REV); prev $(cat $P/REV)" > $S; nvidia-smi -L >> $S; nproc >> $S
t0=$SECONDS
for t in cancel_thread cancel_send coll_revoke; do
  RANKWIRE_ABI_LIBDIR=$B/lib abi/bin/mpicc -O2 -o /tmp/$t abi/tests/c/$t.c -lpthread || echo "compile $t failed" >> $S
  nps=2; [ $t = coll_revoke ] && nps="2 4"
  for n in $nps; do
    a=$(date +%s%N)
    timeout -k 5 150 env LD_LIBRARY_PATH=$B/lib $B/rwrun -n $n /tmp/$t > $O/${t}_$n.log 2>&1; rc=$?
    z=$(date +%s%N)
    echo "$t np=$n: rc=$rc $(( (z - a) / 1000000 )) ms: $(tail -1 $O/${t}_$n.log)" >> $S
  done
done
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
for k in 1 2 3; do
  for v in new prev; do
    D=$B; [ $v = prev ] && D=$P
    timeout -k 5 60 $D/rwrun -n 2 $D/rankwire-bench latency -d cuda --min-size 1 --max-size 1048576 -i 500 > $O/ab/lat_${v}_$k.log 2>&1
    echo "== lat_${v}_$k rc=$?" >> $S
    timeout -k 5 60 $D/rwrun -n 2 $D/rankwire-bench allreduce -d cuda --min-size 8 --max-size 67108864 -i 100 > $O/ab/ar_${v}_$k.log 2>&1
    echo "== ar_${v}_$k rc=$?" >> $S
  done
done
echo "== a/b done $((SECONDS-t0)) s" >> $S
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
print("bench size new(median us) prev(median us) new/prev")
for (b, s) in sorted(d):
    r = d[(b, s)]
    if r["new"] and r["prev"]:
        a, c = statistics.median(r["new"]), statistics.median(r["prev"])
        print(f"{b} {s} {a:.2f} {c:.2f} {a/c:.3f}")
PY
echo "== before gpu-abi $((SECONDS-t0)) s" >> $S
q=1; [ "${FULL_ABI:-0}" = 1 ] && q=0
GPU_ABI_QUICK=$q timeout -k 5 $(( 560 - (SECONDS - t0) )) scripts/gpu-abi.sh $O/abi > $O/abi-run.log 2>&1; echo "== gpu-abi (quick=$q) rc=$? $((SECONDS-t0)) s" >> $S
cat $O/abi/summary.txt >> $S 2>/dev/null
tar czf $O/logs.tgz -C $O ab abi abi-run.log gpucoll.log $(cd $O && ls *.log | grep -v -e abi-run -e gpucoll) 2>/dev/null
