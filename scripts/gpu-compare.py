#!/usr/bin/env python3
"""Side-by-side figures of gpu-compare.sh's runs: after ÷ before for each timing row.

Reads DIR/{after,before,after-mps,before-mps}/{p2p_latency,p2p_bw,coll_bench_2,coll_bench_4,
bench}.log (the OSU-style tables of rankwire-bench and rw-gpuapp's bench) and prints one table
per step and MPS setting: size, before, after, after/before. Where a build ran twice (DIR/after-mps
and DIR/after-mps-2), each row takes its best run.
"""
import os
import sys


def table(path, col):
    """{size: value} of the numeric rows of an OSU-style log (column col after the size)."""
    rows = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) > col and parts[0].isdigit():
                    try:
                        rows[int(parts[0])] = float(parts[col])
                    except ValueError:
                        pass
    except OSError:
        return None
    return rows


STEPS = [
    ("p2p_latency", 1, "device p2p latency (us), 2 ranks; lower is better"),
    ("p2p_bw", 1, "device p2p bandwidth (MB/s), window 16, 2 ranks; higher is better"),
    ("coll_bench_2", 1, "device allreduce avg latency (us), 2 ranks; lower is better"),
    ("coll_bench_4", 1, "device allreduce avg latency (us), 4 ranks; lower is better"),
    ("bench", 1, "rw-gpuapp bench: D2D IPC bandwidth (GB/s, first column); higher is better"),
]


def best(tables, lower):
    """Per size, the best value of the runs that have one (min where lower is better);
    None when no run has the step. Repeated runs (gpu-compare.sh's ABBA order with MPS)
    sit in DIR-2."""
    tables = [t for t in tables if t]
    if not tables:
        return None
    pick = min if lower else max
    sizes = sorted(set().union(*tables))
    return {s: pick(t[s] for t in tables if s in t) for s in sizes}


def main():
    d = sys.argv[1]
    for suffix, label in (("", "without MPS"), ("-mps", "with MPS")):
        a_dir, b_dir = os.path.join(d, "after" + suffix), os.path.join(d, "before" + suffix)
        if not os.path.isdir(a_dir):
            continue
        for step, col, title in STEPS:
            lower = "lower is better" in title
            a = best([table(os.path.join(x, step + ".log"), col) for x in (a_dir, a_dir + "-2")], lower)
            b = best([table(os.path.join(x, step + ".log"), col) for x in (b_dir, b_dir + "-2")], lower)
            if not a:
                continue
            print(f"## {title}, {label}")
            print("| size (B) | before | after | after ÷ before |")
            print("|---|---|---|---|")
            for s in sorted(a):
                bv = b.get(s) if b else None
                r = f"{a[s] / bv:.2f}" if bv else "–"
                print(f"| {s} | {bv if bv is not None else '–'} | {a[s]} | {r} |")
            print()


if __name__ == "__main__":
    main()
