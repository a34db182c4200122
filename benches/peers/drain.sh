#!/usr/bin/env bash
# Where a window of small messages costs each side (issue 22): `rankwire-bench drain`
# against `peerbench drain` on Open MPI (ob1 + vader), and optionally a second rankwire
# build, interleaved, both ranks bound to their own core, sizes 1-64 B. See the `drain`
# mode in benches/src/main.rs: rank 1 sleeps while a window of 64 messages lands, then
# times posting the receives and the wait that takes them; rank 0 times posting the
# sends and their wait. Figures are nanoseconds per message. A row whose sends waited
# for the receiver (the window did not fit: Open MPI from 64 B) is marked and left out
# of the ratios.
#
# Times the binaries in benches/peers/build/ that run.sh made (rankwire/ is a copy of
# target/release from the last run.sh: run `benches/peers/run.sh -q` after changing the
# code, or copy rwrun and rankwire-bench there). Usage:
#   benches/peers/drain.sh [REPS (7)] [ITERS (20000)] [DIR]
#   RW_BASE=DIR benches/peers/drain.sh ...   # DIR/rwrun, DIR/rankwire-bench: a second build
# Writes DIR/raw.tsv, DIR/runs.tsv (exit status of every run), DIR/stderr.log and
# DIR/table.md (default benches/results/tmp/<date>_<time>-drain/). Exit status 1 when a
# configuration produced no rows at all.
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd) || exit 1
REPS=${1:-7}
ITERS=${2:-20000}
OUT=${3:-$ROOT/benches/results/tmp/$(date -u +%F_%H%M%S)-drain}
case $REPS in '' | *[!0-9]* | 0) echo "drain.sh: REPS must be a positive integer, not '$REPS'" >&2; exit 2 ;; esac
case $ITERS in '' | *[!0-9]* | 0) echo "drain.sh: ITERS must be a positive integer, not '$ITERS'" >&2; exit 2 ;; esac
B=$ROOT/benches/peers/build
P=$ROOT/benches/peers
for f in $B/peerbench.openmpi $B/rankwire/rwrun $B/rankwire/rankwire-bench; do
    [ -x "$f" ] || { echo "drain.sh: $f missing: run benches/peers/run.sh -q first" >&2; exit 1; }
done
if [ -n "${RW_BASE:-}" ]; then
    for f in "$RW_BASE/rwrun" "$RW_BASE/rankwire-bench"; do
        [ -x "$f" ] || { echo "drain.sh: RW_BASE: $f missing or not executable" >&2; exit 1; }
    done
fi
mkdir -p "$OUT" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
WARM=$((ITERS / 10))
declare -A CMD
CMD[ompi-shm]="mpirun.openmpi -n 2 --bind-to core --mca oob_tcp_if_include lo --mca pml ob1 --mca btl self,vader $B/peerbench.openmpi drain -m 1:64 -i $ITERS -w $WARM"
CMD[rankwire]="$B/rankwire/rwrun -n 2 $P/bind-local-rank.sh $B/rankwire/rankwire-bench drain --min-size 1 --max-size 64 --iters $ITERS --warmup $WARM"
CONFIGS="ompi-shm rankwire"
if [ -n "${RW_BASE:-}" ]; then
    CMD[rankwire-base]="$RW_BASE/rwrun -n 2 $P/bind-local-rank.sh $RW_BASE/rankwire-bench drain --min-size 1 --max-size 64 --iters $ITERS --warmup $WARM"
    CONFIGS="$CONFIGS rankwire-base"
fi
raw=$OUT/raw.tsv runs=$OUT/runs.tsv
printf 'rep\tconfig\tsize\tsend_post\tsend_wait\trecv_post\trecv_wait\tcheck\tload1\n' > "$raw"
printf 'rep\tconfig\texit\trows\n' > "$runs"
: > "$OUT/stderr.log"
for rep in $(seq 1 "$REPS"); do
    for c in $CONFIGS; do
        load=$(cut -d' ' -f1 /proc/loadavg)
        echo "== rep $rep $c" >> "$OUT/stderr.log"
        out=$(timeout -k 5 120 ${CMD[$c]} 2>>"$OUT/stderr.log" </dev/null)
        rc=$?
        rows=$(printf '%s\n' "$out" | awk -v r="$rep" -v c="$c" -v l="$load" \
            '$1 ~ /^[0-9]+$/ && NF == 6 {printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r, c, $1, $2, $3, $4, $5, $6, l}')
        [ -n "$rows" ] && printf '%s\n' "$rows" >> "$raw"
        n=$(printf '%s' "$rows" | grep -c . || true)
        printf '%s\t%s\t%s\t%s\n' "$rep" "$c" "$rc" "$n" >> "$runs"
        [ "$rc" = 0 ] || echo "drain.sh: rep $rep $c exited with $rc (124: timed out; see $OUT/stderr.log)" >&2
    done
done
python3 - "$raw" "$runs" "$OUT/table.md" "$ITERS" "$CONFIGS" <<'PY'
import sys, statistics
raw, runs, out, iters, configs = sys.argv[1:6]
configs = configs.split()
rows = [l.rstrip("\n").split("\t") for l in open(raw)][1:]
runrows = [l.rstrip("\n").split("\t") for l in open(runs)][1:]
cols = ["send post", "send wait", "recv post", "recv wait"]
val, waited = {}, {}
for rep, cfg, size, *v, check, load in rows:
    key = (cfg, int(size))
    if check == "ok":
        val.setdefault(key, []).append([float(x) for x in v])
    else:
        waited.setdefault(key, []).append([float(x) for x in v])
loads = [float(r[-1]) for r in rows] or [0.0]
sizes = sorted({int(r[2]) for r in rows})
med = statistics.median
good = {c: sum(1 for r in runrows if r[1] == c and r[2] == "0" and r[3] != "0") for c in configs}
with open(out, "w") as f:
    f.write("# Per-side cost of a window of 64 small messages (drain mode), ns per message\n\n")
    f.write(f"Runs of {iters} iterations (timed windows: iters/10, warm-up iters/100), interleaved; "
            "complete runs per configuration: " + ", ".join(f"{c} {good[c]}" for c in configs) +
            f"; 1-minute load {min(loads):.2f}–{max(loads):.2f}. Medians over the runs; in brackets "
            "the minimum; n = runs in the cell.\n"
            "Sender: posting the window's sends, then waiting for them. Receiver: posting the\n"
            "window's receives after the messages landed, then the wait that takes them\n"
            "(poll, match, copy, complete). Sides: sender = send post + send wait, receiver =\n"
            "recv post + recv wait. A cell marked `waited`: the sends waited for the sleeping\n"
            "receiver (the window did not fit), so the figures are not the per-side cost; they\n"
            "are left out of the ratios.\n\n")
    f.write("| size | config | n | " + " | ".join(cols) + " | sender | receiver |\n|" + "---|" * (len(cols) + 5) + "\n")
    for s in sizes:
        for c in configs:
            xs = val.get((c, s), [])
            if not xs:
                w = waited.get((c, s), [])
                f.write(f"| {s} | {c} | {len(w)} | " + ("waited" if w else "missing") + " | | | | | |\n")
                continue
            cells = [f"{med([x[i] for x in xs]):.1f} ({min(x[i] for x in xs):.1f})" for i in range(4)]
            snd = med([x[0] + x[1] for x in xs]); rcv = med([x[2] + x[3] for x in xs])
            f.write(f"| {s} | {c} | {len(xs)} | " + " | ".join(cells) + f" | {snd:.1f} | {rcv:.1f} |\n")
    def ratios(a, b, title):
        f.write(f"\n{title}\n\n| size | sender | receiver |\n|---|---|---|\n")
        for s in sizes:
            x, y = val.get((a, s), []), val.get((b, s), [])
            if not x or not y:
                f.write(f"| {s} | — | — |\n")
                continue
            sx, sy = med([v[0] + v[1] for v in x]), med([v[0] + v[1] for v in y])
            rx, ry = med([v[2] + v[3] for v in x]), med([v[2] + v[3] for v in y])
            f.write(f"| {s} | {sx / sy:.2f} | {rx / ry:.2f} |\n")
    ratios("rankwire", "ompi-shm", "Ratios of medians, rankwire ÷ Open MPI (lower is better):")
    if "rankwire-base" in configs:
        ratios("rankwire", "rankwire-base", "Ratios of medians, rankwire ÷ rankwire-base (lower is better):")
print(open(out).read())
sys.exit(1 if any(good[c] == 0 for c in configs) else 0)
PY
