#!/usr/bin/env bash
# Device run 3 of this stop: the engine-lock handoff. cancel_thread.c and cancel_send.c
# (threads cancelling requests another thread waits for) timed on the previous build's
# library (.device-bin/lib-prev: 9ddf0cb, which took 31 s and 122 s for them in run 2)
# and on this build's, then scripts/gpu-abi.sh on this build without its OSU part
# (GPU_ABI_QUICK=1: the device time left was short; run 2 ran it on 9ddf0cb).
set -u
export PATH=$PATH:/usr/local/cuda/bin
B=$PWD/.device-bin
O=${OUT:-/tmp/out}; mkdir -p $O
S=$O/summary.txt
echo "build $(cat $B/REV); prev $(cat $B/lib-prev/REV)" > $S; nvidia-smi -L >> $S; nproc >> $S
for t in cancel_thread cancel_send; do
  RANKWIRE_ABI_LIBDIR=$B/lib abi/bin/mpicc -O2 -o /tmp/$t abi/tests/c/$t.c -lpthread
  for v in prev new; do
    L=$B/lib; [ $v = prev ] && L=$B/lib-prev
    # The previous build once, cancel_thread only (device time was short).
    ks=1; [ $v = prev ] && [ $t = cancel_send ] && ks=""
    for k in $ks; do
      t0=$(date +%s%N)
      timeout -k 5 200 env LD_LIBRARY_PATH=$L $B/rwrun -n 2 /tmp/$t > $O/${t}_${v}_$k.log 2>&1; rc=$?
      t1=$(date +%s%N)
      echo "$t $v run $k: rc=$rc $(( (t1 - t0) / 1000000 )) ms: $(tail -1 $O/${t}_${v}_$k.log)" >> $S
    done
  done
done
# SKIP_ABI=1: the timing only (device time left was short).
if [ "${SKIP_ABI:-0}" != 1 ]; then
  GPU_ABI_QUICK=1 timeout -k 5 400 scripts/gpu-abi.sh $O/abi > $O/abi-run.log 2>&1; echo "== gpu-abi rc=$?" >> $S
fi
cat $O/abi/summary.txt >> $S 2>/dev/null
tar czf $O/logs.tgz -C $O abi abi-run.log $(cd $O && ls cancel_*.log) 2>/dev/null
