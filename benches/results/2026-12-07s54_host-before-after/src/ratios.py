import csv,sys,math,collections
d=collections.defaultdict(dict)
for r in csv.DictReader(open(sys.argv[1]),delimiter='\t'):
    if not r['size'].isdigit(): continue
    best = float(r['max']) if r['mode']=='bw' else float(r['min'])
    d[(r['mode'],int(r['np']),int(r['size']))][r['config']]=(best,float(r['median']))
def band(s): return 'a:0-64B' if s<=64 else ('b:128B-64KiB' if s<=65536 else 'c:128KiB+')
out=collections.defaultdict(list)
verbose = '-v' in sys.argv
for k in sorted(d):
    v=d[k]
    if not all(c in v for c in ('rankwire','rankwire-base','ompi-shm')): continue
    rat=[]
    for i in (0,1):
        n,b,o=v['rankwire'][i],v['rankwire-base'][i],v['ompi-shm'][i]
        rat += [n/b, n/o, b/o]
    out[(k[0],k[1],band(k[2]))].append(rat)
    if verbose: print(k, ' '.join(f"{x:.2f}" for x in rat))
print("(mode, np, sizes): best-repeat new/base, new/ompi, base/ompi | median new/base, new/ompi, base/ompi  (geometric means; bw: bandwidth, >1 better; others: time, <1 better)")
for g,l in sorted(out.items()):
    gm=lambda i: math.exp(sum(math.log(x[i]) for x in l)/len(l))
    rng=lambda i: f"{min(x[i] for x in l):.2f}-{max(x[i] for x in l):.2f}"
    print(g, f"n={len(l)} | best {gm(0):.2f} ({rng(0)}) {gm(1):.2f} ({rng(1)}) {gm(2):.2f} | median {gm(3):.2f} ({rng(3)}) {gm(4):.2f} ({rng(4)}) {gm(5):.2f}")
