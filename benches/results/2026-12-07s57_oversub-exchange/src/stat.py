import collections,statistics,sys
d=collections.defaultdict(list)
for l in open(sys.argv[1]):
    p=l.split()
    if len(p)==3 and p[2]!='': d[p[1]].append(float(p[2]))
base=statistics.median(d['ompi']) if 'ompi' in d else None
for k,v in d.items(): print('%-18s median %.2f min %.2f ratio %.2f |'%(k,statistics.median(v),min(v),statistics.median(v)/base if base else 0), ' '.join('%.2f'%x for x in v))
