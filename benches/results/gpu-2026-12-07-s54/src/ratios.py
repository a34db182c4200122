#!/usr/bin/env python3
"""new / base of the best of the alternated launches per size (rankwire-bench logs of
run1.sh: ar_{new,base}_{1,2}[_mps].log, lat_...), geometric mean and range over sizes."""
import sys, glob, math, os, re
d = sys.argv[1]
def read(f):
    out = {}
    for l in open(f):
        p = l.split()
        if p and p[0].isdigit() and len(p) >= 2:
            out[int(p[0])] = float(p[1])
    return out
for kind in ['ar', 'lat']:
    for mps in ['', '_mps']:
        best = {}
        for v in ['new', 'base']:
            runs = [read(f) for f in sorted(glob.glob(f'{d}/{kind}_{v}_[0-9]{mps}.log'))]
            best[v] = {s: min(r[s] for r in runs if s in r) for s in runs[0]}
        rs = [best['new'][s] / best['base'][s] for s in best['new'] if s in best['base']]
        g = math.exp(sum(map(math.log, rs)) / len(rs))
        name = {'ar': 'allreduce -d cuda', 'lat': 'latency -d cuda'}[kind] + (' under MPS' if mps else ' without MPS')
        print(f'{name}: new/base {g:.2f} ({min(rs):.2f}-{max(rs):.2f}) over {len(rs)} sizes; 8 B new {best["new"].get(8)} base {best["base"].get(8)} us')
