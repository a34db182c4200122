#!/bin/bash
rm -rf /tmp/cgom && mkdir -p /tmp/cgom
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for it in 1000 3000; do
timeout 300 mpirun.openmpi -n 2 --mca btl self,vader --mca pml ob1 valgrind --tool=callgrind --collect-atstart=no \
  --toggle-collect='PMPI_Isend' --toggle-collect='PMPI_Irecv' --toggle-collect='PMPI_Waitall' \
  --callgrind-out-file=/tmp/cgom/cg.$it.%q{OMPI_COMM_WORLD_RANK} /work/main/benches/peers/build/peerbench.openmpi drain -m 8:8 -i $it -w 1000 -D 20000 > /tmp/cgom/out.$it.txt 2>&1
done
for r in 0 1; do
  a=$(grep -m1 "^summary:" /tmp/cgom/cg.1000.$r | awk '{print $2}')
  b=$(grep -m1 "^summary:" /tmp/cgom/cg.3000.$r | awk '{print $2}')
  echo "ompi rank $r: $(( (b - a) / (200 * 64) )) instructions per message"
done
