#!/usr/bin/env bash
# Where a window of small messages costs each side (issue 22): `rankwire-bench drain`
# against `peerbench drain` on Open MPI (ob1 + vader), and optionally a second rankwire
# build, interleaved, both ranks bound to their own core. See the `drain` mode in
# benches/src/main.rs: rank 1 lets a window of 64 messages land while it sleeps, then
# times posting the receives and the wait that takes them; rank 0 times posting the
# sends and their wait. Figures are nanoseconds per message.
#
# Uses the binaries run.sh built (benches/peers/build/): run `benches/peers/run.sh -q`
# once first. Usage:
#   benches/peers/drain.sh [REPS (7)] [ITERS (20000)] [DIR]
#   RW_BASE=DIR benches/peers/drain.sh ...   # DIR/rwrun, DIR/rankwire-bench: a second build
# Writes DIR/raw.tsv and DIR/table.md (default benches/results/<date>-drain/).
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
REPS=${1:-7}
ITERS=${2:-20000}
OUT=${3:-benches/results/$(date -u +%F_%H%M%S)-drain}
B=benches/peers/build
P=benches/peers
for f in $B/peerbench.openmpi $B/rankwire/rwrun $B/rankwire/rankwire-bench; do
    [ -x "$f" ] || { echo "drain.sh: $f missing: run benches/peers/run.sh -q first" >&2; exit 1; }
done
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
SIZES=1:64
declare -A CMD
CMD[ompi-shm]="mpirun.openmpi -n 2 --bind-to core --mca oob_tcp_if_include lo --mca pml ob1 --mca btl self,vader $B/peerbench.openmpi drain -m $SIZES -i $ITERS"
CMD[rankwire]="$B/rankwire/rwrun -n 2 $P/bind-local-rank.sh $B/rankwire/rankwire-bench drain --min-size 1 --max-size 64 --iters $ITERS"
CONFIGS="ompi-shm rankwire"
if [ -n "${RW_BASE:-}" ]; then
    CMD[rankwire-base]="$RW_BASE/rwrun -n 2 $P/bind-local-rank.sh $RW_BASE/rankwire-bench drain --min-size 1 --max-size 64 --iters $ITERS"
    CONFIGS="$CONFIGS rankwire-base"
fi
raw=$OUT/raw.tsv
printf 'rep\tconfig\tsize\tsend_post\tsend_wait\trecv_post\trecv_wait\tload1\n' > "$raw"
for rep in $(seq 1 "$REPS"); do
    for c in $CONFIGS; do
        load=$(cut -d' ' -f1 /proc/loadavg)
        timeout 120 ${CMD[$c]} 2>/dev/null </dev/null |
            awk -v r="$rep" -v c="$c" -v l="$load" '$1 ~ /^[0-9]+$/ && NF == 5 {printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r, c, $1, $2, $3, $4, $5, l}' >> "$raw"
    done
done
python3 - "$raw" "$OUT/table.md" "$REPS" "$ITERS" "$CONFIGS" <<'PY'
import sys, statistics
raw, out, reps, iters, configs = sys.argv[1:6]
configs = configs.split()
rows = [l.rstrip("\n").split("\t") for l in open(raw)][1:]
cols = ["send post", "send wait", "recv post", "recv wait"]
val = {}
for rep, cfg, size, *v, load in rows:
    val.setdefault((cfg, int(size)), []).append([float(x) for x in v])
loads = [float(r[-1]) for r in rows] or [0.0]
sizes = sorted({s for (_, s) in val})
med = lambda xs: statistics.median(xs) if xs else float("nan")
with open(out, "w") as f:
    f.write("# Per-side cost of a window of 64 small messages (drain mode), ns per message\n\n")
    f.write(f"{reps} interleaved repeats of {iters} iterations (windows: iters/10); 1-minute load "
            f"{min(loads):.2f}–{max(loads):.2f}. Medians over the repeats; in brackets the minimum.\n"
            "Sender: posting the window's sends, then waiting for them. Receiver: posting the\n"
            "window's receives after every message landed, then the wait that takes them\n"
            "(poll, match, copy, complete). Sides: sender = send post + send wait, receiver =\n"
            "recv post + recv wait.\n\n")
    f.write("| size | config | " + " | ".join(cols) + " | sender | receiver |\n|" + "---|" * (len(cols) + 4) + "\n")
    for s in sizes:
        for c in configs:
            xs = val.get((c, s), [])
            if not xs:
                f.write(f"| {s} | {c} | missing |\n")
                continue
            cells = [f"{med([x[i] for x in xs]):.1f} ({min(x[i] for x in xs):.1f})" for i in range(4)]
            snd = med([x[0] + x[1] for x in xs]); rcv = med([x[2] + x[3] for x in xs])
            f.write(f"| {s} | {c} | " + " | ".join(cells) + f" | {snd:.1f} | {rcv:.1f} |\n")
    if "ompi-shm" in configs:
        f.write("\nRatios of medians, rankwire ÷ Open MPI (lower is better):\n\n| size | sender | receiver |\n|---|---|---|\n")
        for s in sizes:
            o, r = val.get(("ompi-shm", s), []), val.get(("rankwire", s), [])
            if o and r:
                f.write(f"| {s} | {med([x[0]+x[1] for x in r]) / med([x[0]+x[1] for x in o]):.2f} | "
                        f"{med([x[2]+x[3] for x in r]) / med([x[2]+x[3] for x in o]):.2f} |\n")
print(open(out).read())
PY
