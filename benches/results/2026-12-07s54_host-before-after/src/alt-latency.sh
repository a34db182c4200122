#!/bin/bash
# Direct alternation of shared-memory ping-pong latency (2 ranks bound to the two cores):
# per round one launch each of Open MPI (ob1 + vader), this build (new), the base build.
# Usage: alt-latency.sh ROUNDS; MIN/MAX sizes (default 0..4096), ITERS (default 20000).
cd "$(dirname "$0")/../../../.." || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RB=benches/peers/build/rankwire-base; N=target/release
M=${MIN:-0}; X=${MAX:-4096}; I=${ITERS:-20000}
row() { awk '!/^#/ && NF>=2 {printf "%s:%s ", $1, $2} END {print ""}'; }
for r in $(seq 1 "${1:-4}"); do
  echo -n "$r ompi "; mpirun.openmpi --oversubscribe --mca oob_tcp_if_include lo -n 2 --map-by core --bind-to core --mca pml ob1 --mca btl self,vader benches/peers/build/peerbench.openmpi latency -m $M:$X -i $I 2>&1 | row
  echo -n "$r new  "; $N/rwrun -n 2 benches/peers/bind-local-rank.sh $N/rankwire-bench latency --min-size $M --max-size $X -i $I 2>&1 | row
  echo -n "$r base "; $RB/rwrun -n 2 benches/peers/bind-local-rank.sh $RB/rankwire-bench latency --min-size $M --max-size $X -i $I 2>&1 | row
done
