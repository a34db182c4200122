#!/bin/sh
# rankwire-peerbench.sh: run rankwire-bench with peerbench's command line, so
# that benches/peers/run.sh drives rankwire exactly like the MPI peers.
# It runs as every rank, under rwrun:
#
#   target/release/rwrun -n 2 benches/peers/rankwire-peerbench.sh latency -m 0:4194304 -i 2000 -w 200
#
# usage: rankwire-peerbench.sh MODE [-m [A:]B] [-i N] [-w N] [-I N] [-W N]
#                              [-L BYTES] [-n WINDOW] [-D US] [-c] [-s] [-S]
#
# Translation (peerbench -> rankwire-bench):
#   MODE     -> MODE (must be one of rankwire-bench's modes, else exit 3)
#   -m A:B   -> --min-size A --max-size B   (-m B: --max-size B)
#               without -m, peerbench's per-mode defaults are used:
#               bw --min-size 1, allreduce --min-size 4, else 0; max 4 MiB
#   -i N     -> --iters N          -w N -> --warmup N
#   -n W     -> --window W
#   -D US    -> --drain-sleep-us US (drain mode)
#   -I, -W   -> --iters-large/--warmup-large when rankwire-bench has them;
#               otherwise rankwire-bench derives them itself for messages
#               above 8 KiB: point-to-point max(iters/10, 20) and
#               max(warmup/10, 2) (run.sh chooses -I/-W by the same rule, a
#               mismatch is reported on stderr by rank 0, never fatal);
#               collectives iters*8192/size, at least 10 (peerbench -S)
#   -S       -> nothing: rankwire-bench always scales collective iterations
#               as peerbench -S does
#   -L B     -> --large-threshold B when available (rankwire-bench: 8192, as
#               peerbench's default)
#   -c       -> --check when available, else ignored with a note
#   -s       -> ignored with a note (rankwire-bench always gives each bw
#               window slot its own receive buffer, peerbench's default)
# peerbench's mode names and rankwire-bench's are the same.
#   barrier: -m is not passed on (peerbench ignores it too).
#
# Environment: RANKWIRE_BENCH: the rankwire-bench binary (default: the
# workspace's target/release/rankwire-bench). RW_PEERBENCH_EXTRA:
# more rankwire-bench options (words) for the bw, bibw and drain modes
# (run.sh's rankwire-set: --requests=set).
# Exit status: rankwire-bench's; 3 if it has no such mode; 2 on bad usage.
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
BENCH=${RANKWIRE_BENCH:-$HERE/../../target/release/rankwire-bench}
RANK=${RANKWIRE_RANK:-0}

note() { [ "$RANK" = 0 ] && echo "rankwire-peerbench: $*" >&2; return 0; }

case ${1:-} in -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d'; exit 0 ;; esac
if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then
    sed -n '8,9p' "$0" >&2
    exit 2
fi
MODE=$1
shift

if [ ! -x "$BENCH" ]; then
    note "no rankwire-bench at $BENCH (cargo build --release -p rankwire-bench)"
    exit 127
fi
HELP=$("$BENCH" --help 2>&1) || true
# "possible values: latency, bw, bibw" -> " latency bw bibw "
MODES=" $(printf '%s\n' "$HELP" | sed -n 's/.*possible values: \([^]]*\)].*/\1/p' | head -n 1 | tr -d ',') "
case $MODES in
*" $MODE "*) ;;
*)
    note "rankwire-bench has no '$MODE' mode (it has:$MODES); skipped"
    exit 3
    ;;
esac
has_opt() { printf '%s\n' "$HELP" | grep -q -- "$1[ ,=<]"; }

MIN="" MAX="" ITERS="" WARM="" ITERS_L="" WARM_L="" LARGE="" WINDOW="" DRAIN_SLEEP="" CHECK=0
COLL=0
case $MODE in allreduce | bcast | allgather | alltoall | barrier | reduce | scatter | gather) COLL=1 ;; esac
while getopts "m:i:w:I:W:L:n:D:cSsh" opt; do
    case $opt in
    m)
        case $OPTARG in
        *:*) MIN=${OPTARG%%:*} MAX=${OPTARG#*:} ;;
        *) MAX=$OPTARG ;;
        esac
        ;;
    i) ITERS=$OPTARG ;;
    w) WARM=$OPTARG ;;
    I) ITERS_L=$OPTARG ;;
    W) WARM_L=$OPTARG ;;
    L) LARGE=$OPTARG ;;
    n) WINDOW=$OPTARG ;;
    D) DRAIN_SLEEP=$OPTARG ;;
    c) CHECK=1 ;;
    S) ;;
    s) note "-s (shared receive buffer) is not supported; each window slot has its own buffer" ;;
    h) sed -n '2,/^set -u/p' "$0" | sed '$d'; exit 0 ;;
    *) sed -n '8,9p' "$0" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
if [ $# -gt 0 ]; then
    note "unexpected arguments: $*"
    exit 2
fi

set -- "$MODE"
if [ "$MODE" != barrier ]; then
    if [ -z "$MIN" ]; then
        case $MODE in bw | bibw | drain) MIN=1 ;; allreduce) MIN=4 ;; *) MIN=0 ;; esac
    fi
    set -- "$@" --min-size "$MIN"
    [ -n "$MAX" ] && set -- "$@" --max-size "$MAX"
fi
[ -n "$ITERS" ] && set -- "$@" --iters "$ITERS"
[ -n "$WARM" ] && set -- "$@" --warmup "$WARM"
[ -n "$WINDOW" ] && [ "$MODE" != barrier ] && has_opt --window && set -- "$@" --window "$WINDOW"
[ -n "$DRAIN_SLEEP" ] && [ "$MODE" = drain ] && set -- "$@" --drain-sleep-us "$DRAIN_SLEEP"

# rankwire-bench defaults (see its --help): iters 10000, warmup 200
i=${ITERS:-10000} w=${WARM:-200}
if [ "$COLL" = 1 ]; then
    : # rankwire-bench scales collective iterations itself (peerbench -S)
elif [ -n "$ITERS_L" ]; then
    if has_opt --iters-large; then
        set -- "$@" --iters-large "$ITERS_L"
    else
        d=$((i / 10)); [ "$d" -lt 20 ] && d=20
        [ "$d" != "$ITERS_L" ] && note "-I $ITERS_L ignored: rankwire-bench uses $d iterations above 8 KiB"
    fi
fi
if [ "$COLL" = 1 ]; then
    :
elif [ -n "$WARM_L" ]; then
    if has_opt --warmup-large; then
        set -- "$@" --warmup-large "$WARM_L"
    else
        d=$((w / 10)); [ "$d" -lt 2 ] && d=2
        [ "$d" != "$WARM_L" ] && note "-W $WARM_L ignored: rankwire-bench uses $d warm-up iterations above 8 KiB"
    fi
fi
if [ -n "$LARGE" ]; then
    if has_opt --large-threshold; then
        set -- "$@" --large-threshold "$LARGE"
    elif [ "$LARGE" != 8192 ]; then
        note "-L $LARGE ignored: rankwire-bench's threshold is 8192 B"
    fi
fi
if [ "$CHECK" = 1 ]; then
    if has_opt --check; then set -- "$@" --check; else note "-c ignored: rankwire-bench has no --check"; fi
fi

case $MODE in bw | bibw | drain)
    # shellcheck disable=SC2086 # words on purpose
    [ -n "${RW_PEERBENCH_EXTRA:-}" ] && set -- "$@" $RW_PEERBENCH_EXTRA ;;
esac
exec "$BENCH" "$@"
