#!/bin/bash
# Direct alternation of the drain mode (8 B, window 64; each side timed on its own, see
# benches/src/main.rs): per round Open MPI (peerbench drain), this build (new), the base.
# Columns after the label: size, send post, send wait, recv post, recv wait (ns per
# message), check. Usage: alt-drain.sh ROUNDS
cd "$(dirname "$0")/../../../.." || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RB=benches/peers/build/rankwire-base; N=target/release
rwd() { $1/rwrun -n 2 benches/peers/bind-local-rank.sh $1/rankwire-bench drain --min-size 8 --max-size 8 -i 20000 --drain-sleep-us 100 2>&1 | grep -v "^#" | tr -s ' ' | tr '\n' ' '; echo; }
for r in $(seq 1 "${1:-4}"); do
  echo -n "$r ompi "; mpirun.openmpi --oversubscribe --mca oob_tcp_if_include lo -n 2 --map-by core --bind-to core --mca pml ob1 --mca btl self,vader benches/peers/build/peerbench.openmpi drain -m 8:8 -i 20000 -n 64 2>&1 | grep -v "^#" | tr -s ' ' | tr '\n' ' '; echo
  echo -n "$r new  "; rwd $N
  echo -n "$r base "; rwd $RB
done
