#!/bin/bash
# Direct alternation of the 4-rank allreduce on 2 cores (unbound, as run.sh runs it):
# per round Open MPI, then this build (new) and the base build
# (benches/peers/build/rankwire-base) in an order that alternates (base first in odd
# rounds). Usage: alt-ar4.sh ROUNDS; MIN, MAX: sizes in bytes (default 4, 256), ITERS
# (default 2000, run.sh's for oversubscribed runs); NP=2 runs 2 ranks bound to the two
# cores instead (as run.sh does).
cd "$(dirname "$0")/../../../.." || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RB=benches/peers/build/rankwire-base; N=target/release
M=${MIN:-4}; X=${MAX:-256}; I=${ITERS:-2000}; NP=${NP:-4}
OB="--bind-to none"; RBIND=""
[ "$NP" = 2 ] && OB="--map-by core --bind-to core" && RBIND=benches/peers/bind-local-rank.sh
row() { awk '!/^#/ && NF>=2 {printf "%s:%s ", $1, $2} END {print ""}'; }
for r in $(seq 1 "${1:-4}"); do
  echo -n "$r ompi "; mpirun.openmpi --oversubscribe --mca oob_tcp_if_include lo -n $NP $OB --mca pml ob1 --mca btl self,vader benches/peers/build/peerbench.openmpi allreduce -m $M:$X -i $I -S 2>&1 | row
  order="new base"; [ $((r % 2)) = 1 ] && order="base new"
  for v in $order; do d=$N; [ $v = base ] && d=$RB
    echo -n "$r $v "; $d/rwrun -n $NP $RBIND $d/rankwire-bench allreduce --min-size $M --max-size $X -i $I 2>&1 | row
  done
done
