#!/bin/sh
# pin rank to CPU by a policy: PIN=parity (popcount(rank)&1), PIN=mod (rank%2), PIN=half (rank/2)
r=${RANKWIRE_RANK:-${OMPI_COMM_WORLD_RANK:-0}}
case ${PIN:-parity} in
parity) c=0; x=$r; while [ $x -gt 0 ]; do c=$((c ^ (x & 1))); x=$((x >> 1)); done ;;
mod) c=$((r % 2)) ;;
half) c=$((r / 2 % 2)) ;;
esac
exec taskset -c $c "$@"
