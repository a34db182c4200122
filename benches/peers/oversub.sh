#!/usr/bin/env bash
# Oversubscribed small collectives, longer than run.sh's 4-rank rows: 4 ranks on the
# machine's cores (2 here), unbound, 8-byte MPI_SUM allreduce and barrier, Open MPI
# (ob1 + vader) against rankwire, interleaved, REPS repeats of ITERS iterations each.
# Writes DIR/table.md and DIR/raw.tsv (default benches/results/<date>-oversub/).
#
# Uses the binaries run.sh built (benches/peers/build/): run `benches/peers/run.sh -q`
# once first. Usage: benches/peers/oversub.sh [REPS (5)] [ITERS (20000)] [DIR]
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
REPS=${1:-5}
ITERS=${2:-20000}
OUT=${3:-benches/results/$(date -u +%F_%H%M%S)-oversub}
B=benches/peers/build
for f in $B/peerbench.openmpi $B/rankwire/rwrun $B/rankwire/rankwire-bench; do
    [ -x "$f" ] || { echo "oversub.sh: $f missing: run benches/peers/run.sh -q first" >&2; exit 1; }
done
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OMPI="mpirun.openmpi --oversubscribe --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo -n 4 --bind-to none --mca pml ob1 --mca btl self,vader $B/peerbench.openmpi"
RW="$B/rankwire/rwrun -n 4 $B/rankwire/rankwire-bench"
raw=$OUT/raw.tsv
printf 'rep\tconfig\tmode\tus\tload1\n' > "$raw"
for rep in $(seq 1 "$REPS"); do
    load=$(cut -d' ' -f1 /proc/loadavg)
    v=$(timeout 120 $OMPI allreduce -m 8:8 -i "$ITERS" -w 500 2>/dev/null | awk '$1==8{print $2}')
    printf '%s\tompi-shm\tallreduce\t%s\t%s\n' "$rep" "${v:--}" "$load" >> "$raw"
    v=$(timeout 120 $OMPI barrier -i "$ITERS" -w 500 2>/dev/null | awk 'NF>0 && $1 !~ /^#/{x=$1} END{print x}')
    printf '%s\tompi-shm\tbarrier\t%s\t%s\n' "$rep" "${v:--}" "$load" >> "$raw"
    v=$(timeout 120 $RW allreduce --min-size 8 --max-size 8 --iters "$ITERS" --warmup 500 | awk '$1==8{print $2}')
    printf '%s\trankwire\tallreduce\t%s\t%s\n' "$rep" "${v:--}" "$load" >> "$raw"
    v=$(timeout 120 $RW barrier --iters "$ITERS" --warmup 500 | tail -n 1 | awk '{print $1}')
    printf '%s\trankwire\tbarrier\t%s\t%s\n' "$rep" "${v:--}" "$load" >> "$raw"
done
python3 - "$raw" "$OUT/table.md" "$REPS" "$ITERS" <<'PY'
import sys, statistics
raw, out, reps, iters = sys.argv[1:5]
rows = [l.rstrip("\n").split("\t") for l in open(raw)][1:]
val = {}
for rep, cfg, mode, us, load in rows:
    if us not in ("", "-"):
        val.setdefault((cfg, mode), []).append(float(us))
loads = [float(r[4]) for r in rows]
with open(out, "w") as f:
    f.write(f"# 4 ranks on {len(open('/proc/cpuinfo').read().split('processor')) - 1} CPUs, unbound: 8 B allreduce and barrier, µs per call\n\n")
    f.write(f"{reps} interleaved repeats of {iters} iterations; 1-minute load at each repeat's start: "
            f"{min(loads):.2f}–{max(loads):.2f}. Ratio: rankwire ÷ Open MPI (lower is better).\n\n")
    f.write("| mode | Open MPI median (min) | rankwire median (min) | ratio of medians | ratio of mins | per-repeat ratios |\n|---|---|---|---|---|---|\n")
    for mode in ("allreduce", "barrier"):
        o, r = val.get(("ompi-shm", mode), []), val.get(("rankwire", mode), [])
        if not o or not r:
            f.write(f"| {mode} | missing | missing | | | |\n")
            continue
        per = [b / a for a, b in zip(o, r)]
        f.write(f"| {mode} | {statistics.median(o):.2f} ({min(o):.2f}) | {statistics.median(r):.2f} ({min(r):.2f}) | "
                f"{statistics.median(r) / statistics.median(o):.2f} | {min(r) / min(o):.2f} | "
                + ", ".join(f"{x:.2f}" for x in per) + " |\n")
print(open(out).read())
PY
