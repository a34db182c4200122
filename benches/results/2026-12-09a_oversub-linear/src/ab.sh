#!/bin/bash
# The linear collectives of oversubscribed jobs (this stop's library, installed in the
# OSU build's prefix) against the library before them (BASE: a prefix of
# scripts/install.sh, or just lib/libmpi_abi.so.1 and bin/rwrun, run through
# LD_LIBRARY_PATH: the OSU binaries have a RUNPATH) and Open MPI 4.1 (vader), on the OSU
# 7.2 binaries of benches/peers/osu-abi.sh (its build folder), ranks unbound on the 2
# cores, alternated launch by launch.
# Usage: BASE=DIR NPS="3 4 8" ab.sh REPEATS > raw.txt (BENCHES="allreduce" & co: some of
# the four only; used so in ../../2026-12-07s57_oversub-exchange/)
cd "$(dirname "$0")/../../../.."
B=benches/peers/build/osu-abi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RW=$B/prefix/bin/mpiexec
osu() { find $B/$1 -name "osu_$2" -type f | head -1; }
row() { grep -E '^[0-9]' | awk '{printf "%s:%s ",$1,$2}'; }
echo "# $(date -u +%FT%TZ) new: library $(git rev-parse --short HEAD) ($B/prefix/lib); old: $BASE ($(cat $BASE/REV 2>/dev/null)); load $(cut -d' ' -f1 /proc/loadavg)"
for k in $(seq ${1:-3}); do
  for np in ${NPS:-3 4 8}; do
    for b in ${BENCHES:-barrier bcast allreduce alltoall}; do
      [ $np -gt 4 ] && [ $b = alltoall ] && continue
      args="-i 2000 -x 200"; [ $b != barrier ] && args="$args -m 1:4096"
      [ $np -gt 4 ] && args="-i 500 -x 50 $( [ $b != barrier ] && echo -m 1:4096)"
      for c in new old ompi; do
        case $c in
          new) out=$(timeout 120 $RW -n $np $(osu osu-abi $b) $args 2>&1) ;;
          old) out=$(LD_LIBRARY_PATH=$BASE/lib timeout 120 $BASE/bin/rwrun -n $np $(osu osu-abi $b) $args 2>&1) ;;
          ompi) out=$(timeout 120 mpirun.openmpi --oversubscribe -n $np --mca btl self,vader $(osu osu-ompi $b) $args 2>&1) ;;
        esac
        if [ $b = barrier ]; then v="0:$(echo "$out" | grep -E '^ *[0-9.]+ *$|^[0-9 .]+$' | tail -1 | awk '{print $1}')"; else v=$(echo "$out" | row); fi
        echo "$k | $np | $b | $c | $v"
      done
    done
  done
done
