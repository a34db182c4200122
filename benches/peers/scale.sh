#!/usr/bin/env bash
# scale.sh: start-up and shared memory at many ranks per node (issue 21), interleaved
# with the peers in one run.
#
# Each run starts NP ranks of the same program (peerbench / rankwire-bench, allreduce
# of 8 bytes, 1 iteration after 1 warm-up: init, a few allreduces, finalize) and records
# the wall time of the whole launch (launcher start to exit) and the peak of /dev/shm's
# used space while it ran (sampled every 0.1 s: a lower bound of the true peak).
#
#   benches/peers/scale.sh [-r REPEATS] [-N LIST] [-c LIST] [-o DIR] [-t SECS]
#
#   -r N     repeats (default 3); each repeat runs every (NP, config) pair, the configs
#            in a rotated order
#   -N LIST  ranks, comma separated (default 64,128,256)
#   -c LIST  configs (default rankwire,rankwire-tcp,ompi-shm,mpich-default;
#            rankwire-base and rankwire-base-tcp: the build in $RW_BASE_DIR, default
#            benches/peers/build/rankwire-base/, as in run.sh)
#   -o DIR   output (default benches/results/<date>_scale): runs.tsv, summary.md
#   -t SECS  timeout of one launch (default 300; a launch that runs out is recorded
#            with its exit status 124)
#
# Needs what run.sh needs (run `benches/peers/run.sh -q -M startup` once first: it
# installs Open MPI and MPICH where missing and builds peerbench and rankwire's release
# binaries into benches/peers/build/). Wall-clock numbers on this 2-core VM move by
# tens of percent between runs: compare configs within one run (summary.md gives the
# ratio to the best peer per NP, on medians).
set -u -o pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT" || exit 1
P=benches/peers
BUILD=$P/build
REPEATS=3
NPS=64,128,256
CONFIGS=rankwire,rankwire-tcp,ompi-shm,mpich-default
OUT=benches/results/$(date +%Y-%m-%d)_scale
TIMEOUT=300
RW_BASE_DIR=${RW_BASE_DIR:-$BUILD/rankwire-base}
while getopts "r:N:c:o:t:h" o; do
    case $o in
    r) REPEATS=$OPTARG ;;
    N) NPS=$OPTARG ;;
    c) CONFIGS=$OPTARG ;;
    o) OUT=$OPTARG ;;
    t) TIMEOUT=$OPTARG ;;
    *) sed -n '2,26p' "$0"; exit 2 ;;
    esac
done
RW=$BUILD/rankwire
for f in "$RW/rwrun" "$RW/rankwire-bench"; do
    [ -x "$f" ] || { echo "scale.sh: $f missing: run benches/peers/run.sh -q -M startup first" >&2; exit 2; }
done
# Open MPI refuses to run as root without these
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OMPI_RUN="mpirun.openmpi --oversubscribe --bind-to none --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo"
MPICH_RUN="mpirun.mpich -iface lo -bind-to none"
ARGS="allreduce -m 8:8 -i 1 -w 1 -I 1 -W 1"
# The same for rankwire-bench, run directly as the peers run peerbench directly:
# rankwire-peerbench.sh (run.sh's translator) starts `rankwire-bench --help` and a few
# sed pipelines in every rank, which at 256 ranks on 2 cores adds about 0.9 s of launch
# time that is not rankwire's (measured 2026-12-04: 2.96 s with it, 2.07 s without).
RW_ARGS="allreduce --min-size 8 --max-size 8 -i 1 --warmup 1"
cmd() { # CONFIG NP
    case $1 in
    ompi-shm) echo "$OMPI_RUN -n $2 --mca pml ob1 --mca btl self,vader $BUILD/peerbench.openmpi $ARGS" ;;
    mpich-default) echo "env UCX_NET_DEVICES=lo $MPICH_RUN -n $2 $BUILD/peerbench.mpich $ARGS" ;;
    rankwire) echo "$RW/rwrun -n $2 $RW/rankwire-bench $RW_ARGS" ;;
    rankwire-tcp) echo "env RANKWIRE_TRANSPORTS=tcp RANKWIRE_CMA=0 $RW/rwrun -n $2 $RW/rankwire-bench $RW_ARGS" ;;
    rankwire-base) echo "$RW_BASE_DIR/rwrun -n $2 $RW_BASE_DIR/rankwire-bench $RW_ARGS" ;;
    rankwire-base-tcp) echo "env RANKWIRE_TRANSPORTS=tcp RANKWIRE_CMA=0 $RW_BASE_DIR/rwrun -n $2 $RW_BASE_DIR/rankwire-bench $RW_ARGS" ;;
    *) echo "scale.sh: unknown config $1" >&2; exit 2 ;;
    esac
}
mkdir -p "$OUT"
RUNS=$OUT/runs.tsv
printf 'rep\tconfig\tnp\trc\twall_s\tshm_peak_mib\tshm_before_mib\n' >"$RUNS"
used_mib() { df -m --output=used /dev/shm | tail -1 | tr -d ' '; }
IFS=, read -ra CS <<<"$CONFIGS"
IFS=, read -ra NS <<<"$NPS"
{
    echo "# scale.sh run of $(date -u +%FT%TZ)"
    echo "host: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB; /dev/shm $(df -h --output=size /dev/shm | tail -1 | tr -d ' ')"
    echo "rankwire: $(cat "$RW/REV" 2>/dev/null || git rev-parse --short HEAD)"
    for c in "${CS[@]}"; do echo "- $c: $(cmd "$c" NP)"; done
} >"$OUT/setup.txt"
for ((rep = 1; rep <= REPEATS; rep++)); do
    for np in "${NS[@]}"; do
        for ((k = 0; k < ${#CS[@]}; k++)); do
            c=${CS[$(((k + rep) % ${#CS[@]}))]}
            before=$(used_mib)
            peakf=$(mktemp)
            (while :; do used_mib; sleep 0.1; done) >"$peakf" 2>/dev/null &
            sampler=$!
            t0=$(date +%s.%N)
            timeout -k 10 "$TIMEOUT" $(cmd "$c" "$np") >"$OUT/last.out" 2>"$OUT/last.err" </dev/null
            rc=$?
            t1=$(date +%s.%N)
            kill $sampler 2>/dev/null; wait $sampler 2>/dev/null
            peak=$(sort -n "$peakf" | tail -1); rm -f "$peakf"
            wall=$(echo "$t1 - $t0" | bc -l)
            printf '%s\t%s\t%s\t%s\t%.2f\t%s\t%s\n' "$rep" "$c" "$np" "$rc" "$wall" "${peak:-0}" "$before" >>"$RUNS"
            printf 'rep %s np %4s %-16s rc %3s %7.2f s  /dev/shm peak %s MiB\n' "$rep" "$np" "$c" "$rc" "$wall" "${peak:-0}"
            [ $rc = 0 ] || { echo "--- stderr tail"; tail -3 "$OUT/last.err"; }
            # leftovers of a killed launch must not count against the next one
            pkill -9 -f peerbench 2>/dev/null; pkill -9 -f rankwire-bench 2>/dev/null
            sleep 1
        done
    done
done
python3 - "$RUNS" >"$OUT/summary.md" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
nps = sorted({int(r["np"]) for r in rows})
cfgs = list(dict.fromkeys(r["config"] for r in rows))
def med(c, n, key):
    v = [float(r[key]) for r in rows if r["config"] == c and int(r["np"]) == n and r["rc"] == "0"]
    return (statistics.median(v), len(v)) if v else (None, 0)
print("Median wall time of a launch (init, allreduces of 8 B, finalize), seconds; in brackets")
print("the peak /dev/shm use in MiB; failed launches are left out (n = successful repeats).\n")
print("| ranks | " + " | ".join(cfgs) + " | rankwire ÷ best peer |")
print("|---" * (len(cfgs) + 2) + "|")
for n in nps:
    cells, peers = [], []
    for c in cfgs:
        w, k = med(c, n, "wall_s")
        s, _ = med(c, n, "shm_peak_mib")
        fails = sum(1 for r in rows if r["config"] == c and int(r["np"]) == n and r["rc"] != "0")
        cells.append("failed" if w is None else f"{w:.2f} [{s:.0f}] (n={k}{', ' + str(fails) + ' failed' if fails else ''})")
        if not c.startswith("rankwire") and w is not None:
            peers.append(w)
    rw, _ = med("rankwire", n, "wall_s")
    ratio = f"{rw / min(peers):.2f}" if rw is not None and peers else "-"
    print(f"| {n} | " + " | ".join(cells) + f" | {ratio} |")
EOF
cat "$OUT/summary.md"
