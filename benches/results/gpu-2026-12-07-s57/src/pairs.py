#!/usr/bin/env python3
"""new/base of alternated allreduce -d cuda pairs (run2.sh logs: ar_{new,base}_N.log): the
median and the best of the launches per size, geometric mean and range over sizes, and
each pair's geometric mean. Usage: pairs.py DIR/logs"""
import sys, glob, math, statistics
d = sys.argv[1]
def read(f):
    o = {}
    for l in open(f):
        p = l.split()
        if p and p[0].isdigit():
            o[int(p[0])] = float(p[1])
    return o
runs = {v: [read(f) for f in sorted(glob.glob(f'{d}/ar_{v}_*.log'))] for v in ('new', 'base')}
sizes = sorted(runs['new'][0])
n = len(runs['new'])
for stat, fn in ((f'median of {n}', statistics.median), (f'best of {n}', min)):
    rs = [fn([r[s] for r in runs['new']]) / fn([r[s] for r in runs['base']]) for s in sizes]
    g = math.exp(sum(map(math.log, rs)) / len(rs))
    print(f'allreduce -d cuda without MPS, {stat}: new/base {g:.2f} ({min(rs):.2f}-{max(rs):.2f}) over {len(sizes)} sizes; '
          f'8 B new {fn([r[8] for r in runs["new"]]):.2f} base {fn([r[8] for r in runs["base"]]):.2f} us')
per = [math.exp(sum(math.log(a[s] / b[s]) for s in sizes) / len(sizes)) for a, b in zip(runs['new'], runs['base'])]
print('per pair geometric means: ' + ' '.join(f'{x:.2f}' for x in per))
