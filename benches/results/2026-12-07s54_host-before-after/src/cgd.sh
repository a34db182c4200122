#!/bin/bash
# /tmp/cgd.sh TAG [B]: drain-mode callgrind, 8 B, 110 windows; per-message instructions per rank
B=${2:-/work/main/target/release}
D=/tmp/cgd.$1; rm -rf $D; mkdir -p $D
timeout 300 $B/rwrun -n 2 valgrind --tool=callgrind --collect-atstart=no --toggle-collect='rankwire_bench::main' --toggle-collect='rankwire::comm::Communicator::recv' --toggle-collect='rankwire::comm::Communicator::send' --toggle-collect='rankwire::universe::init' --toggle-collect='std::thread::functions::sleep' --callgrind-out-file=$D/cg.%q{RANKWIRE_RANK} $B/rankwire-bench drain --min-size 8 --max-size 8 -i 1000 --warmup 100 --drain-sleep-us 20000 > $D/out.txt 2>&1
for r in 0 1; do echo "$1 rank $r: $(( $(grep -m1 '^summary:' $D/cg.$r | awk '{print $2}') / 7040 ))"; done
