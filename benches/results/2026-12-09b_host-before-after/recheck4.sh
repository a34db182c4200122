#!/bin/bash
cd /work/main
P=benches/peers
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OM="mpirun.openmpi --oversubscribe --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo -n 4 --bind-to none --mca pml ob1 --mca btl self,vader $P/build/peerbench.openmpi"
rw() { local d=$P/build/$1; shift; env $EXTRA RANKWIRE_BENCH=$d/rankwire-bench timeout 120 $d/rwrun -n 4 $P/rankwire-peerbench.sh "$@"; }
echo "# alternated recheck, 4 ranks unbound, $(date -u +%FT%TZ); rankwire = $(cat $P/build/rankwire/REV), base = $(cat $P/build/rankwire-base/REV); EXTRA=$EXTRA"
for k in $(seq ${N:-6}); do
  for spec in "${SPECS[@]:-allreduce -m 4:1024 -i 2000 -w 100 -S}"; do
    for c in rankwire rankwire-base ompi; do
      if [ $c = ompi ]; then out=$(timeout 120 $OM $spec 2>&1); else out=$(rw $c $spec 2>&1); fi
      echo "$k | $spec | $c | $(echo "$out" | grep -E '^[0-9]+[[:space:]]' | awk '{printf "%s:%s ", $1, $2}')"
    done
  done
done
