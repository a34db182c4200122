#!/usr/bin/env python3
"""Side-by-side figures of gpu-compare.sh's runs: after ÷ before for each timing row.

Reads DIR/{after,before,after-mps,before-mps}/{p2p_latency,p2p_bw,coll_bench_2,coll_bench_4,
bench}.log (the OSU-style tables of rankwire-bench and rw-gpuapp's bench) and prints one table
per step and MPS setting: size, before, after, after/before.
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


def main():
    d = sys.argv[1]
    for suffix, label in (("", "without MPS"), ("-mps", "with MPS")):
        a_dir, b_dir = os.path.join(d, "after" + suffix), os.path.join(d, "before" + suffix)
        if not os.path.isdir(a_dir):
            continue
        for step, col, title in STEPS:
            a = table(os.path.join(a_dir, step + ".log"), col)
            b = table(os.path.join(b_dir, step + ".log"), col) if os.path.isdir(b_dir) else None
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
