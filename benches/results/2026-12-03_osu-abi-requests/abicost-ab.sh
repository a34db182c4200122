#!/bin/bash
# alternate base/new libraries on the same abicost binary, rwrun -n 1 pinned to CPU 0
out=/tmp/abicost-ab.tsv; : > $out
for k in 1 2 3 4 5 6; do
  for v in base new; do
    l=$(cut -d' ' -f1 /proc/loadavg)
    env LD_LIBRARY_PATH=/tmp/rw-$v/lib taskset -c 0 /tmp/rw-new/bin/rwrun -n 1 /tmp/abicost 200000 2>&1 | sed "s/^/$k\t$v\t$l\t/" >> $out
  done
done
