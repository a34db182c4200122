#!/bin/bash
# rounds of: ompi unbound, ompi parity, rw default, rw parity, rw linear, rw mod
R=${R:-6}; IT=${IT:-20000}; SZ=${SZ:-8}
cd /work/main
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
B=benches/peers/build
OMPI="mpirun.openmpi --oversubscribe --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo -n ${NP:-4} --bind-to none --mca pml ob1 --mca btl self,vader"
RW="target/release/rwrun -n ${NP:-4}"
RB=target/release/rankwire-bench
for r in $(seq 1 $R); do
 for c in ${CONFIGS:-ompi ompi-parity rw rw-parity rw-linear rw-mod}; do
  case $c in
   ompi) v=$(timeout 120 $OMPI $B/peerbench.openmpi allreduce -m $SZ:$SZ -i $IT -w 500 2>/dev/null | awk -v s=$SZ '$1==s{print $2}');;
   ompi-parity) v=$(PIN=parity timeout 120 $OMPI -x PIN /tmp/pin.sh $B/peerbench.openmpi allreduce -m $SZ:$SZ -i $IT -w 500 2>/dev/null | awk -v s=$SZ '$1==s{print $2}');;
   ompi-mod) v=$(PIN=mod timeout 120 $OMPI -x PIN /tmp/pin.sh $B/peerbench.openmpi allreduce -m $SZ:$SZ -i $IT -w 500 2>/dev/null | awk -v s=$SZ '$1==s{print $2}');;
   ompi-half) v=$(PIN=half timeout 120 $OMPI -x PIN /tmp/pin.sh $B/peerbench.openmpi allreduce -m $SZ:$SZ -i $IT -w 500 2>/dev/null | awk -v s=$SZ '$1==s{print $2}');;
   rw) v=$(timeout 120 $RW $RB allreduce --min-size $SZ --max-size $SZ --iters $IT --warmup 500 | awk -v s=$SZ '$1==s{print $2}');;
   rw-parity) v=$(PIN=parity timeout 120 $RW /tmp/pin.sh $RB allreduce --min-size $SZ --max-size $SZ --iters $IT --warmup 500 | awk -v s=$SZ '$1==s{print $2}');;
   rw-mod) v=$(PIN=mod timeout 120 $RW /tmp/pin.sh $RB allreduce --min-size $SZ --max-size $SZ --iters $IT --warmup 500 | awk -v s=$SZ '$1==s{print $2}');;
   rw-half) v=$(PIN=half timeout 120 $RW /tmp/pin.sh $RB allreduce --min-size $SZ --max-size $SZ --iters $IT --warmup 500 | awk -v s=$SZ '$1==s{print $2}');;
   rw-rd) v=$(RANKWIRE_ALLREDUCE_ALGO=recursive_doubling timeout 120 $RW $RB allreduce --min-size $SZ --max-size $SZ --iters $IT --warmup 500 | awk -v s=$SZ '$1==s{print $2}');;
   rw-linear) v=$(RANKWIRE_ALLREDUCE_ALGO=linear timeout 120 $RW $RB allreduce --min-size $SZ --max-size $SZ --iters $IT --warmup 500 | awk -v s=$SZ '$1==s{print $2}');;
   rw-linear-parity) v=$(RANKWIRE_ALLREDUCE_ALGO=linear PIN=parity timeout 120 $RW /tmp/pin.sh $RB allreduce --min-size $SZ --max-size $SZ --iters $IT --warmup 500 | awk -v s=$SZ '$1==s{print $2}');;
  esac
  echo "$r $c $v"
 done
done
