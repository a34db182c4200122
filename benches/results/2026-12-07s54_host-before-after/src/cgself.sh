#!/bin/bash
# self cost per function (merged over files), per message: cgself.sh FILE NMSGS [N]
callgrind_annotate --threshold=100 --auto=no "$1" 2>/dev/null | awk '/file:function/{f=1;getline;next} f && NF==0 {exit} f' | python3 -c "
import sys,re,collections
agg=collections.Counter()
for l in sys.stdin:
    m=re.match(r'\s*([\d,]+)\s+\(.*?\)\s+(.*?):(.*)',l)
    if not m: continue
    n=int(m.group(1).replace(',',''))
    fn=re.sub(r'\s*\[.*\]$','',m.group(3))
    agg[fn[:120]]+=n
tot=sum(agg.values())
print(f'total {tot/$2:.1f}')
for fn,n in agg.most_common(${3:-40}): print(f'{n/$2:7.1f}  {fn}')
"
