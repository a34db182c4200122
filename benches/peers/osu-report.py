#!/usr/bin/env python3
"""osu-report.py OUTDIR: summary.tsv, table.md and plot.png from osu-abi.sh's results.

Reads OUTDIR/meta.tsv, libs.tsv, results.tsv and runs.tsv (written by
benches/peers/osu-abi.sh). Standard library only, except the plot, which needs
matplotlib and is skipped (with a note in table.md) without it.

Ratios (per row: benchmark x ranks x size, median over the repeats; the same from the
best repeat at the end): `abi/peer` = rw-abi divided by the best of the peers (Open MPI,
MPICH, MPICH through the standard ABI), `abi/bench` = rw-abi divided by rankwire-bench, `abi/base` (with the rw-abi-base configuration) = rw-abi divided by rw-abi-base,
`bench/peer` = rankwire-bench divided by the best peer. For times (latency and the
collectives) < 1 means rw-abi (or rankwire-bench) is faster; for bandwidths (bw, bibw)
> 1 means it moves more.
"""

import csv
import math
import os
import statistics
import sys
from collections import defaultdict

OURS = "rw-abi"
BENCH = "rw-bench"
PEERS = ["ompi", "mpich", "mpich-abi"]
BASE = "rw-abi-base"
ORDER = ["rw-abi", "rw-abi-base", "rw-bench", "mpich-abi", "ompi", "mpich"]
INFO = {
    # bench: (what, higher_is_better)
    "latency": ("osu_latency: one-way latency, µs", False),
    "bw": ("osu_bw: bandwidth, MB/s (10^6 B/s), window of 64", True),
    "bibw": ("osu_bibw: both directions, MB/s, window of 64", True),
    "allreduce": ("osu_allreduce: MPI_SUM of floats, µs per call (average over ranks)", False),
    "bcast": ("osu_bcast: from rank 0, µs per call (average over ranks)", False),
    "barrier": ("osu_barrier: µs per call (average over ranks)", False),
    "alltoall": ("osu_alltoall: size per destination, µs per call (average over ranks)", False),
}
BENCH_ORDER = ["latency", "bw", "bibw", "allreduce", "bcast", "barrier", "alltoall"]


def read_tsv(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def read_meta(path):
    meta = {}
    if os.path.exists(path):
        for line in open(path):
            k, _, v = line.rstrip("\n").partition("\t")
            meta[k] = v
    return meta


def fmt(v):
    if v is None:
        return "–"
    if v >= 1000:
        return f"{v:.0f}"
    if v >= 100:
        return f"{v:.1f}"
    return f"{v:.2f}"


def size_key(s):
    return -1 if s == "-" else int(s)


def size_label(s):
    if s == "-":
        return "–"
    n = int(s)
    for unit, k in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k}{unit}"
    return str(n)


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def main():
    out = sys.argv[1]
    meta = read_meta(os.path.join(out, "meta.tsv"))
    rows = read_tsv(os.path.join(out, "results.tsv"))
    runs = read_tsv(os.path.join(out, "runs.tsv"))
    libs = read_tsv(os.path.join(out, "libs.tsv"))
    vals = defaultdict(list)  # (config, bench, np, size) -> values over repeats
    for r in rows:
        vals[(r["config"], r["bench"], r["np"], r["size"])].append(float(r["value"]))
    configs = [c for c in ORDER if any(k[0] == c for k in vals)]
    cells = sorted(
        {(k[1], k[2], k[3]) for k in vals},
        key=lambda t: (BENCH_ORDER.index(t[0]) if t[0] in BENCH_ORDER else 99, int(t[1]), size_key(t[2])),
    )

    def stat(c, b, np, s, which):
        v = vals.get((c, b, np, s))
        if not v:
            return None
        if which == "median":
            return statistics.median(v)
        return max(v) if INFO[b][1] else min(v)

    def best_peer(b, np, s, which):
        cand = [(stat(p, b, np, s, which), p) for p in PEERS]
        cand = [(v, p) for v, p in cand if v is not None]
        if not cand:
            return None, None
        return (max if INFO[b][1] else min)(cand)

    def ratio(a, b):
        return a / b if a is not None and b else None

    # summary.tsv
    with open(os.path.join(out, "summary.tsv"), "w") as f:
        f.write("config\tbench\tnp\tsize\tn\tmin\tmedian\tmax\n")
        for (c, b, np, s), v in sorted(vals.items()):
            f.write(f"{c}\t{b}\t{np}\t{s}\t{len(v)}\t{min(v)}\t{statistics.median(v)}\t{max(v)}\n")

    lines = []
    w = lines.append
    w(f"# OSU 7.2 through the MPI standard ABI: rankwire vs MPICH, Open MPI, rankwire-bench ({meta.get('date', '?')})")
    w("")
    w(f"- host: {meta.get('host', '?')}")
    w(f"- {meta.get('versions', '?')}")
    w(f"- repeats: {meta.get('repeats', '?')} (interleaved, configuration order rotating); iterations (small sizes, iters/warm-up): {meta.get('iters', '?')}; sizes up to {meta.get('max', '?')} B; elapsed {meta.get('elapsed_s', '?')} s")
    loads = [float(r["load1"]) for r in runs if r.get("load1") not in (None, "", "-")]
    if loads:
        w(f"- load average (1 min) at the start of the runs: min {min(loads):.2f}, median {statistics.median(loads):.2f}, max {max(loads):.2f}")
    bad = [r for r in runs if r["rc"] not in ("0",)]
    w(f"- osu_bw/osu_bibw receive buffers: {meta.get('osu_bw_bufs', 'single (OSU default)')} (rankwire-bench: the same, `--recv-buffers single`, unless `multiple`: one per window slot)")
    w(f"- runs: {len(runs)}, not exit 0: {len(bad)}" + ("".join(f"; {r['config']} {r['bench']} np={r['np']} rep {r['rep']}: {r['rc']}" for r in bad[:12])))
    if int(meta.get("ncores", "2")) < 4:
        w(f"- 4-rank rows are oversubscribed ({meta.get('ncores')} cores): they measure how a runtime shares cores (spin vs yield), not its best speed; nothing is bound there")
    w("")
    w("Configurations: `rw-abi` = OSU built with rankwire's standard-ABI `mpicc`, run on rankwire's `libmpi_abi.so.1` under rwrun; "
      "`mpich-abi` = the same OSU binaries on MPICH 5.0.2's `libmpi_abi.so.1` (PyPI wheel) under its mpiexec; "
      "`ompi`, `mpich` = OSU built natively with Debian's `mpicc.openmpi` (ob1, vader) and `mpicc.mpich` (ch4:ucx); "
      "`rw-bench` = rankwire-bench (native Rust API). Best peer = best of ompi, mpich, mpich-abi.")
    w("")
    if libs:
        w("Library each configuration loaded (libver.c under the same launcher; the dynamic loader's `calling init` of one OSU run):")
        w("")
        w("| config | MPI_Get_library_version, dladdr(MPI_Init) | OSU binary's libmpi (LD_DEBUG=libs) |")
        w("|---|---|---|")
        for r in libs:
            cols = list(r.values())
            w(f"| {cols[0]} | `{cols[2]}` | `{cols[3]}` |")
        w("")

    has_base = BASE in configs
    base_h = " abi/base |" if has_base else ""

    def table(which):
        w("| bench | np | size | " + " | ".join(configs) + " | abi/peer (best) | abi/bench | bench/peer |" + base_h)
        w("|---|---|---|" + "---|" * len(configs) + "---|---|---|" + ("---|" if has_base else ""))
        for b, np, s in cells:
            v = {c: stat(c, b, np, s, which) for c in configs}
            pv, pn = best_peer(b, np, s, which)
            ra = ratio(v.get(OURS), pv)
            rb = ratio(v.get(OURS), v.get(BENCH))
            rbp = ratio(v.get(BENCH), pv)
            w(f"| {b} | {np} | {size_label(s)} | " + " | ".join(fmt(v[c]) for c in configs)
              + f" | {fmt(ra)} ({pn or '–'}) | {fmt(rb)} | {fmt(rbp)} |"
              + (f" {fmt(ratio(v.get(OURS), v.get(BASE)))} |" if has_base else ""))
        w("")

    # headline: per benchmark x ranks, geometric means of the ratios, and how many rows
    # are within 5 % of rankwire-bench / at least as good as the best peer
    w("## Headline (medians over the repeats)")
    w("")
    w("Per benchmark and rank count: geometric mean over the sizes of each ratio; `abi≈bench` = rows where rw-abi is within 5 % of rankwire-bench "
      "(or better); `abi≥peer | bench≥peer` = rows where rw-abi is at least the best peer, counted among the rows where rankwire-bench is.")
    w("")
    w("| bench | np | rows | abi/peer | abi/bench | bench/peer | abi≈bench | abi≥peer \\| bench≥peer |" + base_h)
    w("|---|---|---|---|---|---|---|---|" + ("---|" if has_base else ""))
    groups = defaultdict(list)
    for b, np, s in cells:
        groups[(b, np)].append(s)
    for (b, np), sizes in groups.items():
        hib = INFO[b][1]
        ra, rb, rbp = [], [], []
        within = good = base = 0
        for s in sizes:
            pv, _ = best_peer(b, np, s, "median")
            o, n = stat(OURS, b, np, s, "median"), stat(BENCH, b, np, s, "median")
            ra.append(ratio(o, pv))
            rb.append(ratio(o, n))
            rbp.append(ratio(n, pv))
            if o is not None and n:
                within += (o >= 0.95 * n) if hib else (o <= 1.05 * n)
            if o is not None and n is not None and pv:
                if (n >= pv) if hib else (n <= pv):
                    base += 1
                    good += (o >= pv) if hib else (o <= pv)
        rbase = [ratio(stat(OURS, b, np, s, "median"), stat(BASE, b, np, s, "median")) for s in sizes]
        w(f"| {b} | {np} | {len(sizes)} | {fmt(geomean(ra))} | {fmt(geomean(rb))} | {fmt(geomean(rbp))} | {within}/{len(sizes)} | {good}/{base} |"
          + (f" {fmt(geomean(rbase))} |" if has_base else ""))
    w("")
    w("## All rows: median over the repeats")
    w("")
    for b in BENCH_ORDER:
        if any(c[0] == b for c in cells):
            w(f"- {b}: {INFO[b][0]}")
    w("")
    table("median")
    if int(meta.get("repeats", "1")) > 1:
        w("## All rows: best repeat (min time, max bandwidth)")
        w("")
        table("best")
    w(plot(out, vals, configs, cells, stat))
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def plot(out, vals, configs, cells, stat):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        return f"no plot.png: matplotlib unavailable ({e.__class__.__name__})"
    panels = []
    for b, np, s in cells:
        if b != "barrier" and (b, np) not in panels:
            panels.append((b, np))
    if not panels:
        return "no plot.png: only osu_barrier ran (it has no sizes; see the tables)"
    ncol = 3
    nrow = (len(panels) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(5 * ncol, 3.6 * nrow), squeeze=False)
    styles = {"rw-abi": ("C0", "-"), "rw-abi-base": ("C3", "-."), "rw-bench": ("C0", ":"), "mpich-abi": ("C1", "--"), "ompi": ("C2", "-"), "mpich": ("C1", "-")}
    for ax, (b, np) in zip(axes.flat, panels):
        for c in configs:
            xs, ys = [], []
            for bb, nn, s in cells:
                if bb == b and nn == np and s != "-" and int(s) > 0:
                    v = stat(c, b, np, s, "median")
                    if v is not None:
                        xs.append(int(s))
                        ys.append(v)
            if xs:
                col, ls = styles.get(c, (None, "-"))
                ax.plot(xs, ys, ls, color=col, marker=".", label=c)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{b}, {np} ranks" + (" (oversubscribed)" if int(np) > 2 else ""), fontsize=10)
        ax.set_xlabel("bytes")
        ax.set_ylabel("MB/s" if INFO[b][1] else "µs")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle("OSU 7.2 via the standard ABI (rw-abi, mpich-abi) vs native builds and rankwire-bench; median of repeats")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "plot.png"), dpi=70)
    return "plot: plot.png (log-log, one panel per benchmark and rank count; barrier only in the tables)"


if __name__ == "__main__":
    main()
