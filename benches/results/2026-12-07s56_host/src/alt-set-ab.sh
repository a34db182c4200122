#!/bin/bash
# Windowed bandwidth, two builds, both with --requests ${REQ:-set}: per round Open MPI,
# this build (target/release, "new") and BASEDIR (default /tmp/rw-head, "base": copy
# the parent's rwrun and rankwire-bench there), order alternating by round. Used for
# the two dropped experiments (64-byte records, the biased engine lock).
# Usage: alt-set-ab.sh ROUNDS; MIN/MAX, ITERS, REQ as above. Ratios: benches/results/2026-12-07s54_tcp-congestion/src/ratios.py LOG.
cd "$(dirname "$0")/../../../.." || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
N=target/release; B=${BASEDIR:-/tmp/rw-head}; M=${MIN:-1}; X=${MAX:-64}; I=${ITERS:-20000}
row() { awk '!/^#/ && NF>=2 {printf "%s:%s ", $1, $2} END {print ""}'; }
for r in $(seq 1 "${1:-4}"); do
  echo -n "$r ompi "; mpirun.openmpi --oversubscribe --mca oob_tcp_if_include lo -n 2 --map-by core --bind-to core --mca pml ob1 --mca btl self,vader benches/peers/build/peerbench.openmpi bw -m $M:$X -i $I -n 64 2>&1 | row
  o="new base"; [ $((r % 2)) = 0 ] && o="base new"
  for v in $o; do
    d=$N; [ $v = base ] && d=$B
    printf '%s %-4s ' "$r" "$v"; $d/rwrun -n 2 benches/peers/bind-local-rank.sh $d/rankwire-bench bw --requests ${REQ:-set} --min-size $M --max-size $X -i $I 2>&1 | row
  done
done
