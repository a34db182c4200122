#!/bin/bash
# Direct alternation of TCP ping-pong latency (2 ranks bound to the two cores), one launch
# of each configuration per round, configurations in turn: Open MPI's tcp BTL on lo,
# rankwire (this build: RANKWIRE_TCP_CONGESTION unset = auto), the same build with
# RANKWIRE_TCP_CONGESTION=system (the kernel's default, bbr here), and the base build.
# Usage: alt-tcp.sh ROUNDS  (run from the repository root; prints one line per launch)
cd "$(dirname "$0")/../../../.." || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RB=benches/peers/build/rankwire-base; N=target/release
M=${MIN:-65536}; X=${MAX:-4194304}; I=${ITERS:-3000}
row() { awk '!/^#/ && NF>=2 {printf "%s:%s ", $1, $2} END {print ""}'; }
rw() { env RANKWIRE_TRANSPORTS=tcp RANKWIRE_CMA=0 "$@" benches/peers/bind-local-rank.sh; }
for r in $(seq 1 "${1:-4}"); do
  echo -n "$r ompi   "; mpirun.openmpi --oversubscribe --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo -n 2 --map-by core --bind-to core --mca pml ob1 --mca btl self,tcp benches/peers/build/peerbench.openmpi latency -m $M:$X -i $I 2>&1 | row
  echo -n "$r new    "; env RANKWIRE_TRANSPORTS=tcp RANKWIRE_CMA=0 $N/rwrun -n 2 benches/peers/bind-local-rank.sh $N/rankwire-bench latency --min-size $M --max-size $X -i $I 2>&1 | row
  echo -n "$r system "; env RANKWIRE_TCP_CONGESTION=system RANKWIRE_TRANSPORTS=tcp RANKWIRE_CMA=0 $N/rwrun -n 2 benches/peers/bind-local-rank.sh $N/rankwire-bench latency --min-size $M --max-size $X -i $I 2>&1 | row
  echo -n "$r base   "; env RANKWIRE_TRANSPORTS=tcp RANKWIRE_CMA=0 $RB/rwrun -n 2 benches/peers/bind-local-rank.sh $RB/rankwire-bench latency --min-size $M --max-size $X -i $I 2>&1 | row
done
