#!/bin/bash
# per-message instruction counts in drain mode (8 B), from two iteration counts (constants cancel):
# collected inside rankwire_bench::main except in Communicator::recv/send (the token) and init.
B=${1:-/work/main/target/release}
rm -rf /tmp/cgdr && mkdir -p /tmp/cgdr
for it in 1000 3000; do
timeout 300 $B/rwrun -n 2 valgrind --tool=callgrind --collect-atstart=no \
  --toggle-collect='rankwire_bench::main' --toggle-collect='rankwire::comm::Communicator::recv' \
  --toggle-collect='rankwire::comm::Communicator::send' --toggle-collect='rankwire::universe::init' \
  --toggle-collect='std::thread::functions::sleep' \
  --callgrind-out-file=/tmp/cgdr/cg.$it.%q{RANK} $B/rankwire-bench drain --min-size 8 --max-size 8 -i $it --warmup 100 --drain-sleep-us 20000 > /tmp/cgdr/out.$it.txt 2>&1
done
for r in 0 1; do
  a=$(grep -m1 "^summary:" /tmp/cgdr/cg.1000.$r | awk '{print $2}')
  b=$(grep -m1 "^summary:" /tmp/cgdr/cg.3000.$r | awk '{print $2}')
  echo "rank $r: $(( (b - a) / (200 * 64) )) instructions per message (isend/irecv + wait_all)"
done
