#!/usr/bin/env bash
# Device run of stop 46: device channels (NCCL-style stream-ordered send/recv; one
# kernel per side between ranks of a node with a peer-memory path) and the peer
# kernels' agreement check (fingerprint of every rank's call), on this build; the
# parent's build (.device-bin/prev) for the device allreduce A/B.
#  1. MPS: rw-gpuapp channels at 2 and 4 ranks (ring 8 B - 8 MiB between user kernels,
#     8-byte ping-pong, size mismatch); streamp2p's ping-pong (the proxy route) and
#     rankwire-bench latency -d cuda (blocking) in the same run, for the ratios;
#  2. MPS: rw-gpucoll check (2 ranks) and peer (4 ranks): the peer collectives with
#     the agreement check; device allreduce new vs prev alternated twice;
#  3. no MPS: rw-gpuapp channels at 2 ranks (pairs take the stream proxy).
set -u
export PATH=$PATH:/usr/local/cuda/bin
B=$PWD/.device-bin
P=$B/prev
O=${OUT:-/tmp/out}; mkdir -p $O/ab
S=$O/summary.txt
echo "build $(cat $B/REV); prev $(cat $P/REV)" > $S; nvidia-smi -L >> $S
t0=$SECONDS
step() { # name timeout cmd...
  local n=$1 t=$2; shift 2
  timeout -k 5 $t "$@" > $O/$n.log 2>&1; local rc=$?
  echo "== $n rc=$rc $((SECONDS-t0)) s" >> $S
  grep -E "one way|set up|mismatch|FAILED|error|ok$" $O/$n.log | grep -v "ring .* ok" | head -20 >> $S
  grep -c "ring .* ok" $O/$n.log | sed 's/^/ring ok lines: /' >> $S
}
. scripts/mps.sh; mps_start > /dev/null; echo "mps: $MPS_WHY" >> $S
step ch2_mps 120 env RW_STREAM_ITERS=20,200,2000,20000 $B/rwrun -n 2 $B/rw-gpuapp channels
step ch4_mps 120 env RW_STREAM_ITERS=20,2000 $B/rwrun -n 4 $B/rw-gpuapp channels
step sp2_mps 120 env RW_STREAM_PP_ONLY=1 RW_STREAM_ITERS=20,200,2000 $B/rwrun -n 2 $B/rw-gpuapp streamp2p
step lat_mps 60 $B/rwrun -n 2 $B/rankwire-bench latency -d cuda --min-size 1 --max-size 1024 -i 1000
tail -12 $O/lat_mps.log >> $S
step gpucoll2 200 $B/rwrun -n 2 $B/rw-gpucoll check
tail -3 $O/gpucoll2.log >> $S
step gpupeer4 200 $B/rwrun -n 4 $B/rw-gpucoll peer 4194304
tail -3 $O/gpupeer4.log >> $S
for k in 1 2; do
  for v in new prev; do
    D=$B; [ $v = prev ] && D=$P
    timeout -k 5 60 $D/rwrun -n 2 $D/rankwire-bench allreduce -d cuda --min-size 8 --max-size 4194304 -i 300 > $O/ab/ar_${v}_$k.log 2>&1
    echo "== ar_${v}_$k rc=$?" >> $S
  done
done
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
step ch2_nomps 150 env RW_STREAM_ITERS=20,200 $B/rwrun -n 2 $B/rw-gpuapp channels
echo "== total $((SECONDS-t0)) s" >> $S
tar czf $O/logs.tgz -C $O $(cd $O && ls *.log) ab 2>/dev/null
