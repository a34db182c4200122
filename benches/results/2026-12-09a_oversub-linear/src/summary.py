#!/usr/bin/env python3
"""Medians over the repeats of raw.txt (ab.sh) per (ranks, benchmark, size, config), and
the ratios new/old and new/ompi, as a markdown table on stdout."""
import sys, statistics, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1] if len(sys.argv) > 1 else "raw.txt"):
    if line.startswith("#") or "|" not in line:
        continue
    k, np, b, c, vals = [x.strip() for x in line.split("|")]
    for kv in vals.split():
        size, v = kv.split(":")
        if v:
            rows[(int(np), b, int(size), c)].append(float(v))
keys = sorted({(np, b, s) for (np, b, s, c) in rows})
print("| ranks | benchmark | size (B) | new µs | base µs | Open MPI µs | new ÷ base | new ÷ Open MPI |")
print("|---|---|---|---|---|---|---|---|")
for np, b, s in keys:
    med = {c: statistics.median(rows[(np, b, s, c)]) for c in ("new", "old", "ompi") if rows.get((np, b, s, c))}
    if len(med) < 3:
        continue
    sz = "-" if b == "barrier" else str(s)
    print(f"| {np} | {b} | {sz} | {med['new']:.2f} | {med['old']:.2f} | {med['ompi']:.2f} | {med['new']/med['old']:.2f} | {med['new']/med['ompi']:.2f} |")
