#!/bin/bash
# osu_barrier alone, more alternations than ab.sh (its barrier cells move ±30 % between
# launches): new (OSU build prefix), base (BASE prefix, LD_LIBRARY_PATH), Open MPI.
# Usage: BASE=DIR NPS="3 4" barrier.sh REPEATS > barrier.txt
cd "$(dirname "$0")/../../../.."
B=benches/peers/build/osu-abi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
X=$(find $B/osu-abi -name osu_barrier -type f | head -1); XO=$(find $B/osu-ompi -name osu_barrier -type f | head -1)
echo "# $(date -u +%FT%TZ) new: $(git rev-parse --short HEAD); old: $BASE ($(cat $BASE/REV 2>/dev/null))"
for k in $(seq ${1:-9}); do
  for np in ${NPS:-3 4}; do
    n=$(timeout 60 $B/prefix/bin/mpiexec -n $np $X -i 4000 -x 200 2>&1 | tail -1 | awk '{print $1}')
    o=$(LD_LIBRARY_PATH=$BASE/lib timeout 60 $BASE/bin/rwrun -n $np $X -i 4000 -x 200 2>&1 | tail -1 | awk '{print $1}')
    m=$(timeout 60 mpirun.openmpi --oversubscribe -n $np --mca btl self,vader $XO -i 4000 -x 200 2>&1 | tail -1 | awk '{print $1}')
    echo "$k | $np | barrier | new | 0:$n"; echo "$k | $np | barrier | old | 0:$o"; echo "$k | $np | barrier | ompi | 0:$m"
  done
done
