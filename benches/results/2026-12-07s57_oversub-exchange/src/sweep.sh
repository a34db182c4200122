#!/bin/bash
# alternate RANKWIRE_ALLREDUCE_ALGO=A vs B at NP ranks, sizes MIN..MAX, R rounds; prints "round algo size us"
cd /work/main
for r in $(seq 1 ${R:-4}); do for a in ${ALGOS:-exchange recursive_doubling}; do
RANKWIRE_ALLREDUCE_ALGO=$a timeout 120 target/release/rwrun -n $NP target/release/rankwire-bench allreduce --min-size ${MIN:-4} --max-size ${MAX:-4096} --iters ${IT:-5000} --warmup 200 ${EXTRA:-} | awk -v r=$r -v a=$a '$1 ~ /^[0-9]+$/ {print r, a, $1, $2}'
done; done
