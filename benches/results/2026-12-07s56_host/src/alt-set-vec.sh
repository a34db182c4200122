#!/bin/bash
# Windowed bandwidth (window 64, 2 ranks bound to the two cores), one binary, two
# request forms: per round one launch each of Open MPI (ob1 + vader), rankwire-bench
# --requests set ("new") and --requests vec ("base"), the order of the last two
# alternating by round. Usage: alt-set-vec.sh ROUNDS; MIN/MAX sizes (1..64), ITERS (20000).
# Ratios: python3 benches/results/2026-12-07s54_tcp-congestion/src/ratios.py LOG.
cd "$(dirname "$0")/../../../.." || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
N=target/release; M=${MIN:-1}; X=${MAX:-64}; I=${ITERS:-20000}
row() { awk '!/^#/ && NF>=2 {printf "%s:%s ", $1, $2} END {print ""}'; }
for r in $(seq 1 "${1:-4}"); do
  echo -n "$r ompi "; mpirun.openmpi --oversubscribe --mca oob_tcp_if_include lo -n 2 --map-by core --bind-to core --mca pml ob1 --mca btl self,vader benches/peers/build/peerbench.openmpi bw -m $M:$X -i $I -n 64 2>&1 | row
  o="vec set"; [ $((r % 2)) = 0 ] && o="set vec"
  for v in $o; do
    n=$v; [ $v = vec ] && n=base; [ $v = set ] && n=new
    printf '%s %-4s ' "$r" "$n"; $N/rwrun -n 2 benches/peers/bind-local-rank.sh $N/rankwire-bench bw --requests $v --min-size $M --max-size $X -i $I 2>&1 | row
  done
done
