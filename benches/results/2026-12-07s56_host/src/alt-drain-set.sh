#!/bin/bash
# Drain mode (8 B, each side timed alone), one binary, both request forms, order
# alternating by round. Usage: alt-drain-set.sh ROUNDS. Row: round form send-post
# send-wait recv-post recv-wait (ns per message).
cd "$(dirname "$0")/../../../.." || exit 1
for r in $(seq 1 "${1:-10}"); do
  o="vec set"; [ $((r % 2)) = 0 ] && o="set vec"
  for v in $o; do
    echo "$r $v $(target/release/rwrun -n 2 benches/peers/bind-local-rank.sh target/release/rankwire-bench drain --requests $v --min-size 8 --max-size 8 -i 20000 2>&1 | awk '$1 == 8 {print $2, $3, $4, $5}')"
  done
done
