#!/usr/bin/env python3
"""report.py OUTDIR: summary.tsv, table.md and plot.png from run.sh's results.

Reads OUTDIR/meta.tsv, configs.tsv, results.tsv, runs.tsv (written by
benches/peers/run.sh).  Standard library only, except the plot, which needs
matplotlib and is skipped (with a note in table.md) without it.
"""

import csv
import os
import statistics
import sys
from collections import defaultdict

PEERS = ["ompi-shm", "ompi-tcp", "mpich-default", "mpich-netmod"]
TCP_PEERS = ["ompi-tcp", "mpich-netmod"]
# (this build, its baseline): "rankwire ÷ rankwire-base" columns, before/after in one run
BASE_PAIRS = [("rankwire", "rankwire-base"), ("rankwire-tcp", "rankwire-base-tcp")]
MODE_INFO = {
    # mode: (title, unit, higher_is_better)
    "latency": ("latency", "one-way latency, µs", False),
    "bw": ("bw", "bandwidth, MB/s (10^6 B/s), window of 64 sends", True),
    "allreduce": ("allreduce", "MPI_SUM of floats, µs per call (average over ranks)", False),
    "barrier": ("barrier", "µs per call (average over ranks)", False),
    "startup": ("startup", "launcher running `/bin/true` on every rank, ms (hyperfine median)", False),
}
MODE_ORDER = ["latency", "bw", "allreduce", "barrier", "startup"]


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


def size_label(s, mode):
    if s == "-":
        return {"barrier": "(barrier)", "startup": "-n 2 /bin/true"}.get(mode, "-")
    n = int(s)
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n} ({n >> shift} {unit})"
    return str(n)


def main():
    out = sys.argv[1]
    meta = read_meta(os.path.join(out, "meta.tsv"))
    configs_rows = read_tsv(os.path.join(out, "configs.tsv"))
    results = read_tsv(os.path.join(out, "results.tsv"))
    runs = read_tsv(os.path.join(out, "runs.tsv"))
    configs = [c for c in meta.get("configs", "").split(",") if c]
    modes = [m for m in MODE_ORDER if m in meta.get("modes", "").split(",")]
    np_coll = [n for n in meta.get("np_coll", "2,4").split(",") if n]
    repeats = int(meta.get("repeats", "1"))

    # ---- summary: (config, mode, np, size) -> values over repeats
    vals = defaultdict(list)
    for r in results:
        try:
            vals[(r["config"], r["mode"], r["np"], r["size"])].append(float(r["value"]))
        except (ValueError, KeyError):
            continue
    stats = {}
    with open(os.path.join(out, "summary.tsv"), "w") as f:
        f.write("config\tmode\tnp\tsize\tn\tmin\tmedian\tmax\n")
        for k in sorted(vals, key=lambda k: (k[1], int(k[2]), size_key(k[3]), k[0])):
            v = vals[k]
            st = (len(v), min(v), statistics.median(v), max(v))
            stats[k] = st
            f.write("\t".join(k) + f"\t{st[0]}\t{st[1]:g}\t{st[2]:g}\t{st[3]:g}\n")

    def cell(c, mode, np, size, which):
        st = stats.get((c, mode, np, size))
        if st is None:
            return None
        if which == "min":
            # "best" repeat: lowest time, highest bandwidth
            return st[3] if MODE_INFO[mode][2] else st[1]
        return st[2]

    md = []
    w = md.append
    w(f"# rankwire vs Open MPI and MPICH: {meta.get('date', '')}")
    w("")
    w(f"- host: {meta.get('host', '?')}")
    w(f"- {meta.get('versions', '?')}")
    w(
        f"- {repeats} repeat(s), interleaved; cells are the **median** over repeats"
        + (" (best repeat: last section and summary.tsv)" if repeats > 1 else "")
        + (" — **quick smoke run, not for comparison**" if meta.get("quick") == "1" else "")
    )
    w(
        f"- iterations (above 8 KiB: -I/-W; allreduce: iterations × 8192/size, at least 10): "
        f"bw `{meta.get('args', '')}`, window {meta.get('window', '64')}; "
        f"latency, allreduce and barrier `{meta.get('time_args', meta.get('args', ''))}`; "
        f"oversubscribed runs (ranks > {meta.get('ncores', '?')} cores, unbound): `{meta.get('oversub_args', '')}`"
        + (
            f", MPICH `{meta['oversub_args_slow']}` (its busy polling takes milliseconds per operation there)"
            if meta.get("oversub_args_slow")
            else ""
        )
    )
    loads = [float(r["load1"]) for r in runs if r.get("load1") not in (None, "", "-")]
    if loads:
        w(
            f"- 1-minute load average at the start of each run: min {min(loads):.2f}, median "
            f"{statistics.median(loads):.2f}, max {max(loads):.2f} ({meta.get('ncores', '?')} cores; "
            "includes the benchmark itself; the machine is shared, see README)"
        )
    if "elapsed_s" in meta:
        w(f"- run time: {int(meta['elapsed_s']) // 60} min {int(meta['elapsed_s']) % 60} s")
    w("")
    w("Ratios: rankwire ÷ best peer in that row (best = lowest time, or highest bandwidth; the")
    w("best peer is named). Time-like modes: < 1 means rankwire is faster. bw: > 1 means rankwire")
    w("moves more data. `rankwire-tcp ÷ best TCP peer` compares against ompi-tcp and mpich-netmod only.")
    w("")
    w("## Configurations")
    w("")
    w("| name | what | command (2 ranks) |")
    w("|---|---|---|")
    for row in configs_rows:
        if row["np"] == "2":
            w(f"| {row['config']} | {row['description']} | `{row['command']}` |")
    w("")
    w("4 ranks: the same with `-n 4` and `--bind-to none` / `-bind-to none` / no bind wrapper.")
    w("")

    rw = [c for c in ("rankwire", "rankwire-tcp", "rankwire-set") if c in configs]
    peers = [c for c in PEERS if c in configs]
    tcp_peers = [c for c in TCP_PEERS if c in configs]

    def ratio(mode, np, size, which, ours, against):
        higher = MODE_INFO[mode][2]
        mine = cell(ours, mode, np, size, which)
        theirs = [(cell(p, mode, np, size, which), p) for p in against]
        theirs = [(v, p) for v, p in theirs if v is not None and v > 0]
        if mine is None or not theirs:
            return "–"
        best, who = max(theirs) if higher else min(theirs)
        return f"{mine / best:.2f} ({who})"

    def tables(which):
        for mode in modes:
            title, unit, higher = MODE_INFO[mode]
            nps = np_coll if mode in ("allreduce", "barrier") else ["2"]
            for np in nps:
                sizes = sorted({k[3] for k in stats if k[1] == mode and k[2] == np}, key=size_key)
                better = "higher is better" if higher else "lower is better"
                over = " — oversubscribed, unbound" if int(np) > int(meta.get("ncores", "2")) else ""
                w(f"### {title}, {np} ranks{over}: {unit}; {better}")
                w("")
                if not sizes:
                    w("(no data)")
                    w("")
                    continue
                head = ["size (B)" if mode in ("latency", "bw", "allreduce") else "run"] + configs
                if "rankwire" in rw and peers:
                    head.append("rankwire ÷ best peer")
                if "rankwire-tcp" in rw and tcp_peers:
                    head.append("rankwire-tcp ÷ best TCP peer")
                if "rankwire-set" in rw and peers and mode == "bw":
                    head.append("rankwire-set ÷ best peer")
                for ours, base in BASE_PAIRS:
                    if ours in configs and base in configs:
                        head.append(f"{ours} ÷ {base}")
                w("| " + " | ".join(head) + " |")
                w("|" + "---|" * len(head))
                for s in sizes:
                    row = [size_label(s, mode)] + [fmt(cell(c, mode, np, s, which)) for c in configs]
                    if "rankwire" in rw and peers:
                        row.append(ratio(mode, np, s, which, "rankwire", peers))
                    if "rankwire-tcp" in rw and tcp_peers:
                        row.append(ratio(mode, np, s, which, "rankwire-tcp", tcp_peers))
                    if "rankwire-set" in rw and peers and mode == "bw":
                        row.append(ratio(mode, np, s, which, "rankwire-set", peers))
                    for ours, base in BASE_PAIRS:
                        if ours in configs and base in configs:
                            row.append(ratio(mode, np, s, which, ours, [base]).split(" (")[0])
                    w("| " + " | ".join(row) + " |")
                w("")

    w("## Results (median over repeats)")
    w("")
    tables("median")

    # ---- memcpy ceiling
    msizes = sorted({k[3] for k in stats if k[1] == "memcpy"}, key=size_key)
    if msizes:
        w("## Single-core memcpy (ceiling of any one-copy transport), GB/s (10^9 B/s)")
        w("")
        w("`memcpybench`, pinned to one core, same buffers over and over (small sizes stay in cache).")
        w("")
        w("| size (B) | best trial | median trial |")
        w("|---|---|---|")
        for s in msizes:
            w(
                f"| {size_label(s, 'memcpy')} | {fmt(cell('memcpy', 'memcpy-best', '1', s, 'median'))} | "
                f"{fmt(cell('memcpy', 'memcpy', '1', s, 'median'))} |"
            )
        w("")
        wsizes = sorted({k[3] for k in stats if k[1] == "memcpy-window"}, key=size_key)
        if wsizes:
            w("Into 64 destinations in turn (the receive slots of the bw test: the copies leave the caches, as the bw test's do):")
            w("")
            w("| size (B) | best trial | median trial |")
            w("|---|---|---|")
            for s in wsizes:
                w(
                    f"| {size_label(s, 'memcpy')} | {fmt(cell('memcpy', 'memcpy-window-best', '1', s, 'median'))} | "
                    f"{fmt(cell('memcpy', 'memcpy-window', '1', s, 'median'))} |"
                )
            w("")
        big = "4194304"
        mc = cell("memcpy", "memcpy", "1", big, "median")
        mw = cell("memcpy", "memcpy-window", "1", big, "median")
        if mc and "bw" in modes and any(cell(c, "bw", "2", big, "median") is not None for c in configs):
            line = f"bw at 4 MiB against single-core memcpy at 4 MiB: {mc:.2f} GB/s with the buffers in cache"
            if mw:
                line += f", {mw:.2f} GB/s into the bw test's 64 destinations"
            w(line + " (median trials):")
            w("")
            for c in configs:
                v = cell(c, "bw", "2", big, "median")
                if v is not None:
                    extra = f", **{v / 1000 / mw:.2f}×** the window memcpy" if mw else ""
                    w(f"- {c}: {v:.0f} MB/s = **{v / 1000 / mc:.2f}×** memcpy in cache{extra}")
            w("")

    # ---- notes
    notes = []
    if os.path.exists(os.path.join(out, "notes.txt")):
        notes += [l.strip() for l in open(os.path.join(out, "notes.txt")) if l.strip()]
    skipped = defaultdict(set)
    failed = []
    transports = defaultdict(set)
    adapter = set()
    for r in runs:
        if r["rc"] == "skip":
            skipped[(r["config"], r["note"])].add(f"{r['mode']} np={r['np']}")
        elif r["rc"] not in ("0", ""):
            failed.append(r)
        for part in (r.get("note") or "").split("; "):
            if part.startswith("via "):
                transports[(r["config"], r["mode"])].add(part[4:])
            elif r["rc"] == "0" and part:
                adapter.add(f"{r['config']}: {part}")
    for (c, why), cells in sorted(skipped.items()):
        notes.append(f"{c}: skipped {', '.join(sorted(cells))}: {why}")
    for r in failed:
        rows = r.get("rows", "0")
        how = "killed" if r["rc"] == "hang" else f"exit {r['rc']}"
        notes.append(
            f"{r['config']} {r['mode']} np={r['np']} rep {r['rep']}: {how} after {r['secs']} s"
            f" ({rows} result rows kept): {r['note']}"
        )
    for (c, m), t in sorted(transports.items()):
        notes.append(f"{c} {m}: rankwire-bench reports ranks 0<->1 via {', '.join(sorted(t))}")
    notes += sorted(adapter)
    # sizes must match across configurations
    for mode in modes:
        for np in np_coll if mode in ("allreduce", "barrier") else ["2"]:
            per = {c: {k[3] for k in stats if k[0] == c and k[1] == mode and k[2] == np} for c in configs}
            per = {c: s for c, s in per.items() if s}
            if len({frozenset(s) for s in per.values()}) > 1:
                allsizes = set().union(*per.values())
                for c, s in per.items():
                    if s != allsizes:
                        missing = sorted(allsizes - s, key=size_key)
                        notes.append(f"{mode} np={np}: {c} has no row for size(s) {', '.join(missing)}")

    plot_note = plot(out, stats, configs, modes)
    if plot_note:
        notes.append(plot_note)
    if notes:
        w("## Notes")
        w("")
        for n in notes:
            w(f"- {n}")
        w("")

    if repeats > 1:
        w("## Best repeat (min time / max bandwidth over repeats)")
        w("")
        tables("min")

    with open(os.path.join(out, "table.md"), "w") as f:
        f.write("\n".join(md).rstrip() + "\n")


def plot(out, stats, configs, modes):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        return f"no plot.png: matplotlib unavailable ({e.__class__.__name__})"
    panels = [(m, t) for m, t in (("latency", "one-way latency (µs), 2 ranks"), ("bw", "bandwidth (MB/s), 2 ranks")) if m in modes]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.8), squeeze=False)
    styles = {
        "ompi-shm": ("tab:blue", "-"),
        "ompi-tcp": ("tab:blue", "--"),
        "mpich-default": ("tab:green", "-"),
        "mpich-netmod": ("tab:green", "--"),
        "rankwire": ("tab:red", "-"),
        "rankwire-tcp": ("tab:red", "--"),
        "rankwire-set": ("tab:purple", "-"),
        "rankwire-base": ("tab:orange", "-"),
        "rankwire-base-tcp": ("tab:orange", "--"),
    }
    for ax, (mode, title) in zip(axes[0], panels):
        for c in configs:
            pts = sorted(
                (int(k[3]), st[2]) for k, st in stats.items()
                if k[0] == c and k[1] == mode and k[2] == "2" and k[3] not in ("-", "0") and st[2] > 0
            )
            if pts:
                color, ls = styles.get(c, (None, "-"))
                ax.plot([p[0] for p in pts], [p[1] for p in pts], ls, color=color, marker=".", label=c)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_title(title + " (median)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "plot.png"), dpi=80)
    plt.close(fig)
    return None


if __name__ == "__main__":
    main()
