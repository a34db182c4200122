#!/usr/bin/env python3
"""Per-round ratios of an alternation log (alt-tcp.sh / alt-*.sh output): for each size,
the median and range over rounds of new/other, one launch of each per round (so both
cells of a ratio come from the same minute of the VM's fast or slow mode)."""
import sys, statistics as st
rows = {}
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) < 3 or not p[0].isdigit():
        continue
    rows.setdefault(int(p[0]), {})[p[1]] = {int(a): float(b) for a, b in (x.split(':') for x in p[2:])}
others = [c for c in ['ompi', 'system', 'base'] if any(c in r for r in rows.values())]
sizes = sorted(next(iter(rows.values()))['new'])
print('size ' + ' '.join(f'new/{o}:median(min-max)' for o in others))
for s in sizes:
    cells = []
    for o in others:
        rs = [r['new'][s] / r[o][s] for r in rows.values() if 'new' in r and o in r and s in r[o]]
        cells.append(f'{st.median(rs):.2f}({min(rs):.2f}-{max(rs):.2f})')
    print(s, ' '.join(cells))
