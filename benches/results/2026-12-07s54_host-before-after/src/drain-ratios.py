#!/usr/bin/env python3
"""Per-round ratios of alt-drain.sh's output (time per message: < 1 is better)."""
import sys, statistics as st
rows = {}
for l in open(sys.argv[1]):
    p = l.split()
    if len(p) < 7:
        continue
    rows.setdefault(p[0], {})[p[1]] = [float(x) for x in p[3:7]]
names = ['send post', 'send wait', 'recv post', 'recv wait']
print('column: median over rounds of new/base, new/ompi (time per message: < 1 is better); receiver = post + wait')
for i, n in enumerate(names):
    nb = [r['new'][i] / r['base'][i] for r in rows.values()]
    no = [r['new'][i] / r['ompi'][i] for r in rows.values()]
    print(f"{n}: new/base {st.median(nb):.2f} ({min(nb):.2f}-{max(nb):.2f}), new/ompi {st.median(no):.2f}")
rv = lambda r, c: r[c][2] + r[c][3]
nb = [rv(r, 'new') / rv(r, 'base') for r in rows.values()]
no = [rv(r, 'new') / rv(r, 'ompi') for r in rows.values()]
print(f"receiver: new/base {st.median(nb):.2f} ({min(nb):.2f}-{max(nb):.2f}), new/ompi {st.median(no):.2f} ({min(no):.2f}-{max(no):.2f})")
