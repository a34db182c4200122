#!/bin/bash
# per round: Open MPI barrier, then rankwire barrier with each RANKWIRE_BARRIER_ALGO in ALGOS (order rotating); NP ranks unbound
cd /work/main
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
NP=${NP:-4}; IT=${IT:-20000}
OMPI="mpirun.openmpi --oversubscribe --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo -n $NP --bind-to none --mca pml ob1 --mca btl self,vader benches/peers/build/peerbench.openmpi"
for r in $(seq 1 ${R:-8}); do
  v=$(timeout 120 $OMPI barrier -i $IT -w 500 2>/dev/null | awk 'NF>0 && $1 !~ /^#/{x=$1} END{print x}'); echo "$r ompi $v"
  set -- ${ALGOS:-linear exchange dissemination}; n=$#; k=$((r % n))
  algos=$(echo "$@ $@" | cut -d' ' -f$((k+1))-$((k+n)))
  for a in $algos; do
    v=$(RANKWIRE_BARRIER_ALGO=$a timeout 120 target/release/rwrun -n $NP target/release/rankwire-bench barrier --iters $IT --warmup 500 | tail -n 1 | awk '{print $1}'); echo "$r $a $v"
  done
done
