#!/bin/bash
P=${1:-/tmp/rw-prefixN}
rm -rf /tmp/cgab && mkdir -p /tmp/cgab
for it in 1000 3000; do
timeout 300 $P/bin/mpiexec -n 2 valgrind --tool=callgrind --collect-atstart=no \
  --toggle-collect='MPI_Isend' --toggle-collect='MPI_Irecv' --toggle-collect='MPI_Waitall' \
  --callgrind-out-file=/tmp/cgab/cg.$it.%q{RANK} /tmp/pb.abi drain -m 8:8 -i $it -w 1000 -D 20000 > /tmp/cgab/out.$it.txt 2>&1
done
for r in 0 1; do
  a=$(grep -m1 "^summary:" /tmp/cgab/cg.1000.$r | awk '{print $2}')
  b=$(grep -m1 "^summary:" /tmp/cgab/cg.3000.$r | awk '{print $2}')
  echo "abi rank $r: $(( (b - a) / (200 * 64) )) instructions per message"
done
