#!/bin/bash
# Direct alternation of windowed bandwidth (window 64, 2 ranks bound to the two cores):
# per round one launch each of Open MPI (ob1 + vader), this build (new) and the base build
# (benches/peers/build/rankwire-base). Usage: alt-bw.sh ROUNDS (from the repository root
# or anywhere). MIN/MAX: sizes (default 1..64 B), ITERS (default 20000). REVERSE=1 runs
# base before new in each round (a fixed order can bias the ratios on this VM).
cd "$(dirname "$0")/../../../.." || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RB=benches/peers/build/rankwire-base; N=target/release
M=${MIN:-1}; X=${MAX:-64}; I=${ITERS:-20000}
row() { awk '!/^#/ && NF>=2 {printf "%s:%s ", $1, $2} END {print ""}'; }
for r in $(seq 1 "${1:-4}"); do
  echo -n "$r ompi "; mpirun.openmpi --oversubscribe --mca oob_tcp_if_include lo -n 2 --map-by core --bind-to core --mca pml ob1 --mca btl self,vader benches/peers/build/peerbench.openmpi bw -m $M:$X -i $I -n 64 2>&1 | row
  for v in $([ "${REVERSE:-0}" = 1 ] && echo base new || echo new base); do
    d=$N; [ $v = base ] && d=$RB
    printf '%s %-4s ' "$r" "$v"; $d/rwrun -n 2 benches/peers/bind-local-rank.sh $d/rankwire-bench bw --min-size $M --max-size $X -i $I 2>&1 | row
  done
done
