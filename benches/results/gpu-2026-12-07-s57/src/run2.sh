#!/usr/bin/env bash
# GPU calls 2 and 3 of session 57: recheck of call 1's allreduce -d cuda without MPS
# (new/base 1.06, 0.97-1.17, from two alternated pairs of time-sliced runs) with more
# alternated pairs (call 2: PAIRS=4, all sizes; call 3: PAIRS=8 MAX=1048576), the first
# build of each pair alternating. Ratios: src/pairs.py DIR/logs.
set -u
B=$PWD/.device-bin; BB=$B/base; O=${OUT:-/tmp/out}; mkdir -p $O/logs; S=$O/summary.txt
echo "build $(cat $B/REV), base $(cat $BB/REV)" > $S; nvidia-smi -L >> $S
for i in $(seq 1 ${PAIRS:-4}); do
  order="new base"; [ $((i % 2)) = 0 ] && order="base new"
  for v in $order; do d=$B; [ $v = base ] && d=$BB
    timeout -k 5 100 $d/rwrun -n 2 $d/rankwire-bench allreduce -d cuda --max-size ${MAX:-67108864} -i 200 --warmup 10 > $O/logs/ar_${v}_$i.log 2>&1
    echo "ar_${v}_$i rc=$?" >> $S
  done
done
tar czf $O/logs.tgz -C $O logs && rm -rf $O/logs; cat $S
