#!/usr/bin/env bash
# benches/peers/msgrate-profile.sh: where the time of one small message goes in
# the windowed bandwidth test (OSU osu_bw style: 64 nonblocking sends, 64
# posted receives, one wait_all / MPI_Waitall each side, an ack), for rankwire
# and Open MPI's vader in one run.
#
#   benches/peers/msgrate-profile.sh [-o DIR] [-s BYTES] [-i ITERS] [-r REPEATS]
#   RW_DIR=benches/peers/build/rankwire-base benches/peers/msgrate-profile.sh -o DIR
#
# Each rank runs under `perf record` (cpu-clock sampling: these VMs expose no
# hardware counters, so "cycles" are time samples), bound to its own core. The
# bandwidth the benchmark prints gives the time per message (size / bandwidth);
# the samples of each rank, grouped into phases by symbol (msgrate-phases.py),
# split that time. Then, where valgrind is installed, one short run of each
# under callgrind counts the instructions of every isend, irecv and waitall
# (deterministic, unlike the time shares: the table's second part). Output:
# DIR/breakdown.md (the tables), DIR/<config>.<rank>.txt (perf's symbol lists),
# DIR/<config>.<rank>.calls.txt (callgrind's caller trees), DIR/runs.tsv
# (bandwidth of each repeat; the profiled run is the last). Needs perf, Open MPI
# (benches/peers/run.sh installs it and builds peerbench) and a release build
# of rankwire.
#
# Defaults: -s 8 (bytes), -i 200000 (bw iterations of 64 messages: ~13 million
# messages, so init and warm-up are a negligible share of the samples), -r 3
# (unprofiled repeats before the profiled one, interleaved rankwire / Open MPI;
# the table's time per message is the median of these), -o
# benches/results/tmp/msgrate-profile.
set -u -o pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT" || exit 1
OUT=benches/results/tmp/msgrate-profile
SIZE=8
ITERS=200000
REPEATS=3
while getopts "o:s:i:r:h" opt; do
    case $opt in
    o) OUT=$OPTARG ;;
    s) SIZE=$OPTARG ;;
    i) ITERS=$OPTARG ;;
    r) REPEATS=$OPTARG ;;
    *) sed -n 2,22p "$0"; exit 2 ;;
    esac
done
command -v perf >/dev/null || { echo "msgrate-profile: perf is not installed (apt-get install linux-perf)" >&2; exit 2; }
# RW_DIR: where rwrun and rankwire-bench are (default: this checkout's release
# build, built if missing), e.g. a baseline build for a before/after pair.
RW=${RW_DIR:-target/release}
if [ -z "${RW_DIR:-}" ] && { [ ! -x $RW/rwrun ] || [ ! -x $RW/rankwire-bench ]; }; then
    cargo build --release -p rankwire-mpirun -p rankwire-bench || exit 1
fi
PB=benches/peers/build/peerbench.openmpi
[ -x $PB ] || { echo "msgrate-profile: $PB is missing: run benches/peers/run.sh -q once (it builds it)" >&2; exit 2; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
WRAP=$(mktemp /tmp/msgrate-wrap.XXXXXX)
trap 'rm -f "$WRAP"' EXIT
# The wrapper binds each rank to its core and, when PROFILE names a file
# prefix, records it.
cat >"$WRAP" <<'EOF'
#!/bin/sh
r=${RANKWIRE_LOCAL_RANK:-${OMPI_COMM_WORLD_LOCAL_RANK:-0}}
if [ -n "${PROFILE:-}" ]; then
    exec taskset -c "$r" perf record -q -F 20000 -o "$PROFILE.$r.data" "$@"
fi
if [ -n "${CALLGRIND:-}" ]; then
    exec valgrind -q --tool=callgrind --callgrind-out-file="$CALLGRIND.$r.out" "$@"
fi
exec taskset -c "$r" "$@"
EOF
chmod +x "$WRAP"

run_one() { # config profile-prefix [iterations] -> prints MB/s of $SIZE
    local it=${3:-$ITERS}
    case $1 in
    rankwire)
        PROFILE=$2 timeout 300 $RW/rwrun -n 2 "$WRAP" $RW/rankwire-bench bw \
            --min-size "$SIZE" --max-size "$SIZE" -i "$it" --warmup 200 ;;
    ompi-shm)
        PROFILE=$2 timeout 300 mpirun.openmpi -x PROFILE -x CALLGRIND --oversubscribe \
            --mca oob_tcp_if_include lo -n 2 --bind-to none --mca pml ob1 \
            --mca btl self,vader "$WRAP" $PB bw -m "$SIZE:$SIZE" -i "$it" -w 200 -n 64 ;;
    esac 2>/dev/null | awk -v s="$SIZE" '$1 == s { print $2 }'
}

printf 'config\trepeat\tMB/s\n' >"$OUT/runs.tsv"
for rep in $(seq 1 "$REPEATS") profiled; do
    for c in rankwire ompi-shm; do
        prefix=""
        [ "$rep" = profiled ] && prefix=$OUT/$c
        bw=$(run_one $c "$prefix")
        echo "$c $rep: ${bw:-FAILED} MB/s" >&2
        printf '%s\t%s\t%s\n' "$c" "$rep" "${bw:-}" >>"$OUT/runs.tsv"
    done
done
for c in rankwire ompi-shm; do
    for r in 0 1; do
        perf report -q -i "$OUT/$c.$r.data" --no-children --sort dso,symbol \
            --percent-limit 0 --stdio 2>/dev/null | grep -v '^$' >"$OUT/$c.$r.txt"
        rm -f "$OUT/$c.$r.data" "$OUT/$c.$r.data.old"
    done
done
if command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null; then
    for c in rankwire ompi-shm; do
        # 2000 iterations: 200 windows of 64 in both programs (they run iters/10).
        CALLGRIND=$OUT/$c.cg run_one $c "" 2000 >/dev/null
        for r in 0 1; do
            callgrind_annotate --inclusive=yes --tree=caller "$OUT/$c.cg.$r.out" \
                >"$OUT/$c.$r.calls.txt" 2>/dev/null
            rm -f "$OUT/$c.cg.$r.out"
        done
    done
else
    echo "msgrate-profile: valgrind is not installed: no instruction counts (apt-get install valgrind)" >&2
fi
python3 "$HERE/msgrate-phases.py" "$OUT" "$SIZE" | tee "$OUT/breakdown.md"
