#!/bin/sh
# bind-local-rank.sh: pin this rank to its own CPU, then exec the program.
# rwrun has no binding option (its ranks are never bound), so run.sh binds
# rankwire's ranks like `mpirun --bind-to core` does for the MPI peers:
#
#   target/release/rwrun -n 2 benches/peers/bind-local-rank.sh PROGRAM [ARGS...]
#
# which is the same as
#   rwrun -n 2 sh -c 'exec taskset -c "$RANKWIRE_LOCAL_RANK" "$0" "$@"' PROGRAM [ARGS...]
# on a machine whose usable CPUs are 0..N-1.  Local rank k gets the k-th CPU
# of RWPB_CPUS (comma-separated list, default: the CPUs this process may run
# on, in order).  With more local ranks than CPUs the rank is left unbound.
set -u
k=${RANKWIRE_LOCAL_RANK:-0}
cpus=${RWPB_CPUS:-}
if [ -z "$cpus" ]; then
    # "pid N's current affinity list: 0-3,8" -> "0,1,2,3,8"
    cpus=$(taskset -pc $$ 2>/dev/null | sed 's/.*: *//' | tr ',' '\n' |
        awk -F- 'NF == 2 { for (i = $1; i <= $2; i++) print i; next } { print }' |
        paste -sd, -)
fi
cpu=$(printf '%s\n' "$cpus" | tr ',' '\n' | sed -n "$((k + 1))p")
if [ -n "$cpu" ] && command -v taskset >/dev/null 2>&1; then
    exec taskset -c "$cpu" "$@"
fi
exec "$@"
