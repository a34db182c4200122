import sys,statistics,collections
d=collections.defaultdict(list)
for l in open(sys.argv[1]):
    if l.startswith('#') or '|' not in l: continue
    k,spec,c,vals=[x.strip() for x in l.split('|')]
    for kv in vals.split():
        s,v=kv.split(':'); d[(spec,int(s),c)].append(float(v))
specs=sorted({(a,b) for a,b,c in d})
for spec,s in specs:
    m={c:statistics.median(d[(spec,s,c)]) for c in ('rankwire','rankwire-base','ompi') if (spec,s,c) in d}
    print(f"{spec.split()[0]} {s}: new {m['rankwire']:.2f} base {m['rankwire-base']:.2f} ompi {m.get('ompi',float('nan')):.2f} new/base {m['rankwire']/m['rankwire-base']:.2f} new/ompi {m['rankwire']/m.get('ompi',float('nan')):.2f}")
