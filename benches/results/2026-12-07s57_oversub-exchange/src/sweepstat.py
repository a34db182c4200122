import sys,collections,statistics
d=collections.defaultdict(lambda: collections.defaultdict(dict))
algos=[]
for l in open(sys.argv[1]):
    r,a,s,u=l.split(); d[int(s)][a][r]=float(u)
    if a not in algos: algos.append(a)
a0,a1=algos[0],algos[1]
print('size', *[f'{a[:10]:>10}' for a in algos], 'ratio(med of per-round)')
for s in sorted(d):
    per=[d[s][a0][r]/d[s][a1][r] for r in d[s][a0] if r in d[s][a1]]
    print(f'{s:5d}', *[f'{statistics.median(d[s][a].values()):10.2f}' for a in algos], f'{statistics.median(per):.2f} [{min(per):.2f}-{max(per):.2f}]')
