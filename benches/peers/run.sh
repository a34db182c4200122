#!/usr/bin/env bash
# benches/peers/run.sh: rankwire side by side with Open MPI and MPICH on this
# machine, in one interleaved run.  See benches/README.md.
#
#   benches/peers/run.sh            full run (3 repeats, ~6-12 min on 2 cores)
#   benches/peers/run.sh -q         quick smoke run (few iterations, 1 repeat)
#
# What it does:
#  1. installs Debian's Open MPI, MPICH, hyperfine and python3-matplotlib with
#     apt-get if they are missing (as root, or through sudo -n);
#  2. builds benches/peers/peerbench.c against each MPI and memcpybench.c into
#     benches/peers/build/, builds rankwire in release if target/release/rwrun
#     or rankwire-bench is missing, and snapshots both binaries into
#     build/rankwire/ so a concurrent cargo build cannot change them mid-run;
#  3. runs every configuration (see -l) for every mode, the configurations of
#     one cell back to back, repeats interleaved (rep 1 of everything, then
#     rep 2, ...), and a single-core memcpy measurement in every repeat;
#  4. writes results.tsv, runs.tsv, summary.tsv, table.md and plot.png, and
#     prints table.md.
# Each rank is bound to its own core when ranks <= cores (mpirun
# --bind-to core, mpiexec -bind-to core, and for rwrun, which has no binding
# option, benches/peers/bind-local-rank.sh = taskset -c <local rank's CPU>);
# with more ranks than cores nothing is bound.
#
# Options:
#   -q        quick smoke run: few iterations, 1 repeat, output under
#             benches/results/tmp/ (git-ignored); latest/ is left alone
#   -r N      repeats (default 3; -q: 1)
#   -o DIR    output directory (default benches/results/<date>, copied to
#             benches/results/latest/)
#   -M LIST   modes, comma separated (default latency,bw,allreduce,barrier,startup)
#   -c LIST   configurations (default: all, see -l; rankwire-base and
#             rankwire-base-tcp run only when named here: a second rankwire
#             build, rwrun + rankwire-bench in $RW_BASE_DIR, default
#             benches/peers/build/rankwire-base/, for before/after ratios;
#             rankwire-set too: this build's bw with `--requests set`, the
#             window in one rankwire::RequestSet; bw only)
#   -N LIST   ranks for allreduce and barrier (default 2,4)
#   -m A:B    message sizes in bytes, powers of two (default 0:4194304)
#   -a ARGS   bw iterations (default "-i 1000 -w 100 -I 100 -W 10")
#   -A ARGS   latency, allreduce and barrier iterations on 2 ranks (default
#             "-i 20000 -w 2000 -I 2000 -W 200": a sub-microsecond operation
#             needs many iterations to rise above the timer and the noise)
#   -t SECS   timeout of one benchmark run (default 180; -q: 60)
#   -l        print the configurations' command lines and exit
#   -h        this help
set -u -o pipefail
# the whole script is one block, parsed before it runs: editing this file
# while a run is in progress cannot derail that run
{

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT" || exit 1
P=benches/peers                   # paths below are relative to the repo root
BUILD=$P/build

ALL_CONFIGS="ompi-shm,ompi-tcp,mpich-default,mpich-netmod,rankwire,rankwire-tcp,rankwire-set,rankwire-base,rankwire-base-tcp"
CONFIGS="ompi-shm,ompi-tcp,mpich-default,mpich-netmod,rankwire,rankwire-tcp"
MODES="latency,bw,allreduce,barrier,startup"
REPEATS=""
NP_P2P=2
NP_COLL="2,4"
RANGE="0:4194304"
WINDOW=64
# -I/-W follow rankwire-bench's own rule for messages above 8 KiB
# (max(iters/10, 20), max(warmup/10, 2)) so that both sides do the same work
BENCH_ARGS="-i 1000 -w 100 -I 100 -W 10"
TIME_ARGS="-i 20000 -w 2000 -I 2000 -W 200"
# ranks > cores: MPICH spins without yielding and needs a time slice per
# step (6-36 ms per allreduce), so its oversubscribed runs are kept short;
# the others take microseconds and get enough iterations to average the
# scheduler's noise
OVERSUB_ARGS="-i 2000 -w 100 -I 200 -W 10"
OVERSUB_ARGS_SLOW="-i 50 -w 5 -I 20 -W 2"
TIMEOUT=""
STARTUP_RUNS=20
MEMCPY_SECS=0.3
MEMCPY_SIZES="4K 64K 1M 4M 64M"
# sizes of the memcpy into a bw window of rotating destinations
MEMCPY_WINDOW_SIZES="1M 4M"
OUTDIR=""
QUICK=0
LIST_ONLY=0
BENCH_ARGS_OPT=""
TIME_ARGS_OPT=""

usage() { sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

while getopts "qr:o:M:c:N:m:a:A:t:lh" opt; do
    case $opt in
    q) QUICK=1 ;;
    r) REPEATS=$OPTARG ;;
    o) OUTDIR=$OPTARG ;;
    M) MODES=$OPTARG ;;
    c) CONFIGS=$OPTARG ;;
    N) NP_COLL=$OPTARG ;;
    m) RANGE=$OPTARG ;;
    a) BENCH_ARGS_OPT=$OPTARG ;;
    A) TIME_ARGS_OPT=$OPTARG ;;
    t) TIMEOUT=$OPTARG ;;
    l) LIST_ONLY=1 ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || { echo "run.sh: unexpected argument '$1' (see -h)" >&2; exit 2; }

if [ "$QUICK" = 1 ]; then
    REPEATS=${REPEATS:-1}
    BENCH_ARGS="-i 200 -w 20 -I 20 -W 2"
    TIME_ARGS="-i 200 -w 20 -I 20 -W 2"
    OVERSUB_ARGS="-i 20 -w 2 -I 20 -W 2"
    OVERSUB_ARGS_SLOW=$OVERSUB_ARGS
    STARTUP_RUNS=5
    MEMCPY_SECS=0.05
    TIMEOUT=${TIMEOUT:-60}
fi
[ -n "$BENCH_ARGS_OPT" ] && BENCH_ARGS=$BENCH_ARGS_OPT
[ -n "$TIME_ARGS_OPT" ] && TIME_ARGS=$TIME_ARGS_OPT
REPEATS=${REPEATS:-3}
TIMEOUT=${TIMEOUT:-180}
case $REPEATS in '' | *[!0-9]* | 0) echo "run.sh: bad -r '$REPEATS'" >&2; exit 2 ;; esac
case $TIMEOUT in '' | *[!0-9]* | 0) echo "run.sh: bad -t '$TIMEOUT'" >&2; exit 2 ;; esac
case $RANGE in *[!0-9:]* | :* | *: | *:*:*) echo "run.sh: bad -m '$RANGE' (want A:B)" >&2; exit 2 ;; esac
case $RANGE in *:*) ;; *) RANGE="0:$RANGE" ;; esac
RMIN=${RANGE%%:*} RMAX=${RANGE#*:}
IFS=, read -ra CONFIG_LIST <<<"$CONFIGS"
IFS=, read -ra MODE_LIST <<<"$MODES"
IFS=, read -ra NPC_LIST <<<"$NP_COLL"
for c in "${CONFIG_LIST[@]}"; do
    case ",$ALL_CONFIGS," in *",$c,"*) ;; *) echo "run.sh: unknown configuration '$c' (have $ALL_CONFIGS)" >&2; exit 2 ;; esac
done
for m in "${MODE_LIST[@]}"; do
    case $m in latency | bw | allreduce | barrier | startup) ;; *) echo "run.sh: unknown mode '$m'" >&2; exit 2 ;; esac
done

# CPUs this process may use, expanded ("0-2,5" -> 0 1 2 5)
read -ra CPUS <<<"$(taskset -pc $$ 2>/dev/null | sed 's/.*: *//' | tr ',' '\n' |
    awk -F- 'NF == 2 { for (i = $1; i <= $2; i++) print i; next } { print }' | tr '\n' ' ')"
[ ${#CPUS[@]} -gt 0 ] || CPUS=(0)
NCORES=${#CPUS[@]}

if [ "$(id -u)" = 0 ]; then
    # Open MPI refuses to run as root without these
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

RW_RUN=$BUILD/rankwire/rwrun
RW_BENCH=$BUILD/rankwire/rankwire-bench
RW_BASE_DIR=${RW_BASE_DIR:-$BUILD/rankwire-base}
OMPI_RUN="mpirun.openmpi --oversubscribe --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo"
MPICH_RUN="mpirun.mpich -iface lo"

# launcher CONFIG NP: command prefix that starts NP ranks of what follows it
launcher() {
    local c=$1 np=$2 ob mb bind=1
    [ "$np" -le "$NCORES" ] || bind=0
    if [ $bind = 1 ]; then ob="--map-by core --bind-to core" mb="-bind-to core"; else ob="--bind-to none" mb="-bind-to none"; fi
    case $c in
    ompi-shm) echo "$OMPI_RUN -n $np $ob --mca pml ob1 --mca btl self,vader" ;;
    ompi-tcp) echo "$OMPI_RUN -n $np $ob --mca pml ob1 --mca btl self,tcp" ;;
    mpich-default) echo "env UCX_NET_DEVICES=lo $MPICH_RUN -n $np $mb" ;;
    mpich-netmod) echo "env MPIR_CVAR_NOLOCAL=1 UCX_TLS=self,tcp UCX_NET_DEVICES=lo $MPICH_RUN -n $np $mb" ;;
    rankwire) echo "env RANKWIRE_BENCH=$RW_BENCH $RW_RUN -n $np" ;;
    rankwire-tcp) echo "env RANKWIRE_TRANSPORTS=tcp RANKWIRE_CMA=0 RANKWIRE_BENCH=$RW_BENCH $RW_RUN -n $np" ;;
    rankwire-set) echo "env RW_PEERBENCH_EXTRA=--requests=set RANKWIRE_BENCH=$RW_BENCH $RW_RUN -n $np" ;;
    rankwire-base) echo "env RANKWIRE_BENCH=$RW_BASE_DIR/rankwire-bench $RW_BASE_DIR/rwrun -n $np" ;;
    rankwire-base-tcp) echo "env RANKWIRE_TRANSPORTS=tcp RANKWIRE_CMA=0 RANKWIRE_BENCH=$RW_BASE_DIR/rankwire-bench $RW_BASE_DIR/rwrun -n $np" ;;
    esac
}
# program CONFIG NP: the benchmark program (and rank wrapper) for CONFIG
program() {
    case $1 in
    ompi-*) echo "$BUILD/peerbench.openmpi" ;;
    mpich-*) echo "$BUILD/peerbench.mpich" ;;
    rankwire*)
        if [ "$2" -le "$NCORES" ]; then echo "$P/bind-local-rank.sh $P/rankwire-peerbench.sh"; else echo "$P/rankwire-peerbench.sh"; fi ;;
    esac
}
describe() {
    case $1 in
    ompi-shm) echo "Open MPI, ob1 + btl self,vader (shared memory, CMA single copy)" ;;
    ompi-tcp) echo "Open MPI, ob1 + btl self,tcp on lo" ;;
    mpich-default) echo "MPICH as Debian ships it (ch4:ucx; UCX uses shared memory on one node)" ;;
    mpich-netmod) echo "MPICH forced through its network module: UCX self,tcp on lo" ;;
    rankwire) echo "rankwire, default transport selection (shm on one node where built in, else tcp; CMA single copy for large messages); the transport it got is under Notes" ;;
    rankwire-tcp) echo "rankwire forced to TCP: RANKWIRE_TRANSPORTS=tcp RANKWIRE_CMA=0" ;;
    rankwire-set) echo "rankwire (this build), bw with --requests set: each window's sends or receives in one rankwire::RequestSet instead of a Vec<Request> (bw only)" ;;
    rankwire-base) echo "the baseline rankwire build in $RW_BASE_DIR ($(cat "$RW_BASE_DIR/REV" 2>/dev/null || echo 'no REV file')), default selection" ;;
    rankwire-base-tcp) echo "the baseline rankwire build in $RW_BASE_DIR, forced to TCP" ;;
    esac
}
# sizes MODE: the -m argument for MODE (peerbench's minimum per mode)
sizes_arg() {
    local lo=$RMIN
    case $1 in
    bw) [ "$lo" -ge 1 ] || lo=1 ;;
    allreduce) [ "$lo" -ge 4 ] || lo=4 ;;
    barrier | startup) return 0 ;;
    esac
    echo "-m $lo:$RMAX"
}
bench_cmd() { # CONFIG MODE NP -> full command line
    local c=$1 mode=$2 np=$3 args
    if [ "$mode" = startup ]; then
        echo "$(launcher "$c" "$np") /bin/true"
        return
    fi
    if [ "$np" -gt "$NCORES" ]; then
        case $c in
        mpich-*) args="$(sizes_arg "$mode") $OVERSUB_ARGS_SLOW" ;;
        *) args="$(sizes_arg "$mode") $OVERSUB_ARGS" ;;
        esac
    elif [ "$mode" = bw ]; then
        args="$(sizes_arg "$mode") $BENCH_ARGS"
    else
        args="$(sizes_arg "$mode") $TIME_ARGS"
    fi
    [ "$mode" = bw ] && args="$args -n $WINDOW"
    # collectives: above 8 KiB, iterations scaled by 8192/size (at least 10),
    # the rule rankwire-bench uses (see peerbench.c -S)
    [ "$mode" = allreduce ] && args="$args -S"
    echo "$(launcher "$c" "$np") $(program "$c" "$np") $mode ${args# }"
}
nps_for() { case $1 in allreduce | barrier) echo "${NPC_LIST[@]}" ;; *) echo "$NP_P2P" ;; esac; }

if [ "$LIST_ONLY" = 1 ]; then
    for c in "${CONFIG_LIST[@]}"; do
        echo "$c: $(describe "$c")"
        for mode in "${MODE_LIST[@]}"; do
            for np in $(nps_for "$mode"); do echo "  $mode np=$np: $(bench_cmd "$c" "$mode" "$np")"; done
        done
    done
    exit 0
fi

T_START=$(date +%s)
STAMP=$(date +%Y-%m-%d_%H%M%S)
if [ -z "$OUTDIR" ]; then
    if [ "$QUICK" = 1 ]; then OUTDIR=benches/results/tmp/quick-$STAMP; else OUTDIR=benches/results/$STAMP; fi
    DEFAULT_OUT=1
else
    DEFAULT_OUT=0
fi
mkdir -p "$OUTDIR" "$BUILD" || exit 1
# raw outputs (one file per run) are only for debugging: keep them out of
# the committed results unless -o was given
if [ "$DEFAULT_OUT" = 1 ] && [ "$QUICK" = 0 ]; then RAW=benches/results/tmp/raw-$STAMP; else RAW=$OUTDIR/raw; fi
mkdir -p "$RAW" || exit 1
LOG=$BUILD/setup.log
: >"$LOG"
NOTES=$OUTDIR/notes.txt
: >"$NOTES"
note() { echo "$*" >>"$NOTES"; echo "run.sh: $*" >&2; }
say() { echo "run.sh: $*" >&2; }

# ---- leftovers: every benchmark command runs with RWPB_RUN=$RUN_ID in its
# environment (inherited by launchers and ranks); whatever still carries it
# after the command returned is ours and is killed by pid
RUN_ID="$$-$STAMP"
sweep() {
    local pids=() f pid
    for f in $(grep -lzs "^RWPB_RUN=$RUN_ID\$" /proc/[0-9]*/environ 2>/dev/null); do
        pid=${f#/proc/}
        pid=${pid%/environ}
        [ "$pid" = $$ ] || [ "$pid" = "${BASHPID:-$$}" ] || pids+=("$pid")
    done
    [ ${#pids[@]} -gt 0 ] || return 0
    say "killing ${#pids[@]} leftover process(es): ${pids[*]}"
    kill -TERM "${pids[@]}" 2>/dev/null
    sleep 1
    kill -KILL "${pids[@]}" 2>/dev/null
    return 0
}
trap 'sweep' EXIT
trap 'say interrupted; sweep; exit 130' INT TERM HUP

# ---- 1. install what is missing ----------------------------------------------
have() { command -v "$1" >/dev/null 2>&1; }
# the plot needs matplotlib: Debian's python3-matplotlib belongs to
# /usr/bin/python3, which need not be the python3 first in PATH (pyenv...)
find_py() {
    local p
    for p in python3 /usr/bin/python3 "$BUILD/venv/bin/python"; do
        if have "$p" && "$p" -c 'import matplotlib' >/dev/null 2>&1; then echo "$p"; return 0; fi
    done
    return 1
}
pkgs=()
{ have mpirun.openmpi && have mpicc.openmpi; } || pkgs+=(openmpi-bin libopenmpi-dev)
{ have mpirun.mpich && have mpicc.mpich; } || pkgs+=(mpich libmpich-dev)
have hyperfine || pkgs+=(hyperfine)
have gcc || pkgs+=(gcc libc6-dev)
have taskset || pkgs+=(util-linux)
have python3 || pkgs+=(python3)
find_py >/dev/null || pkgs+=(python3-matplotlib)
if [ ${#pkgs[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo -n"
    say "installing ${pkgs[*]} (apt-get; log in $LOG)"
    if ! { timeout -k 5 600 $SUDO apt-get update -q &&
        DEBIAN_FRONTEND=noninteractive timeout -k 5 1200 $SUDO apt-get install -y -q --no-install-recommends "${pkgs[@]}"; } >>"$LOG" 2>&1; then
        note "apt-get install ${pkgs[*]} failed (see $LOG)"
    fi
fi
if ! PY=$(find_py); then
    # last resort: a private virtual environment under build/ (nothing is
    # installed into the system's or the user's site-packages)
    say "no python3 with matplotlib; trying pip in $BUILD/venv"
    { timeout -k 5 120 python3 -m venv "$BUILD/venv" &&
        timeout -k 5 600 "$BUILD/venv/bin/python" -m pip install -q matplotlib; } >>"$LOG" 2>&1
    PY=$(find_py) || { PY=python3; note "matplotlib unavailable: no plot.png"; }
fi
for t in gcc python3 timeout taskset; do have $t || { echo "run.sh: $t is required" >&2; exit 1; }; done

# ---- 2. build ----------------------------------------------------------------
NEED_OMPI=0 NEED_MPICH=0 NEED_RW=0
for c in "${CONFIG_LIST[@]}"; do
    case $c in ompi-*) NEED_OMPI=1 ;; mpich-*) NEED_MPICH=1 ;; rankwire*) NEED_RW=1 ;; esac
done
declare -A BROKEN=() # config -> why it cannot run
ccbuild() { timeout -k 5 120 "$1" -O2 -Wall -Wno-stringop-overflow -o "$2" "$3" >>"$LOG" 2>&1; }
if [ $NEED_OMPI = 1 ] && ! { have mpicc.openmpi && ccbuild mpicc.openmpi $BUILD/peerbench.openmpi $P/peerbench.c; }; then
    note "building peerbench against Open MPI failed (see $LOG): ompi-* skipped"
    BROKEN[ompi-shm]="build failed" BROKEN[ompi-tcp]="build failed"
fi
if [ $NEED_MPICH = 1 ] && ! { have mpicc.mpich && ccbuild mpicc.mpich $BUILD/peerbench.mpich $P/peerbench.c; }; then
    note "building peerbench against MPICH failed (see $LOG): mpich-* skipped"
    BROKEN[mpich-default]="build failed" BROKEN[mpich-netmod]="build failed"
fi
timeout -k 5 120 gcc -O2 -Wall -o $BUILD/memcpybench $P/memcpybench.c >>"$LOG" 2>&1 || { echo "run.sh: building memcpybench failed (see $LOG)" >&2; exit 1; }

RW_MODES=""
if [ $NEED_RW = 1 ]; then
    if [ ! -x target/release/rwrun ] || [ ! -x target/release/rankwire-bench ]; then
        say "building rankwire (cargo build --release; log in $LOG)"
        timeout -k 5 1800 cargo build --release -p rankwire-mpirun -p rankwire-bench >>"$LOG" 2>&1 ||
            note "cargo build --release failed (see $LOG)"
    fi
    if [ -x target/release/rwrun ] && [ -x target/release/rankwire-bench ]; then
        mkdir -p $BUILD/rankwire
        # a private copy: other builds may replace target/release/* mid-run
        cp -f target/release/rwrun target/release/rankwire-bench $BUILD/rankwire/ &&
            touch -r target/release/rankwire-bench $BUILD/rankwire/rankwire-bench
        RW_MODES=" $("$RW_BENCH" --help 2>/dev/null | sed -n 's/.*possible values: \([^]]*\)].*/\1/p' | head -n 1 | tr -d ',') "
    else
        BROKEN[rankwire]="no rankwire binaries" BROKEN[rankwire-tcp]="no rankwire binaries" BROKEN[rankwire-set]="no rankwire binaries"
        note "rankwire binaries missing: rankwire configurations skipped"
    fi
fi
for c in "${CONFIG_LIST[@]}"; do
    case $c in rankwire-base*)
        if [ ! -x "$RW_BASE_DIR/rwrun" ] || [ ! -x "$RW_BASE_DIR/rankwire-bench" ]; then
            BROKEN[$c]="no baseline binaries in $RW_BASE_DIR"
            note "$c skipped: put a baseline build's rwrun and rankwire-bench in $RW_BASE_DIR (RW_BASE_DIR)"
        fi ;;
    esac
done
if [ $NEED_RW = 1 ] && [ -z "${BROKEN[rankwire]:-}" ]; then
    for m in "${MODE_LIST[@]}"; do
        case $m in startup) continue ;; esac
        case $RW_MODES in *" $m "*) ;; *) say "rankwire-bench has no '$m' mode (it has:${RW_MODES% }): rankwire cells for $m left empty" ;; esac
    done
fi

# ---- metadata ----------------------------------------------------------------
ver_ompi=$(mpirun.openmpi --version 2>/dev/null | head -n 1 | sed 's/.*) //')
ver_mpich=$(mpirun.mpich --version 2>/dev/null | sed -n 's/^ *Version: *//p' | head -n 1)
rw_rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
rw_built=$( [ -e "$RW_BENCH" ] && date -u -r "$RW_BENCH" +%FT%TZ || echo -)
{
    printf 'date\t%s\n' "$(date -u +'%F %H:%M UTC')"
    printf 'host\t%s, %s, %s CPUs usable (%s)\n' "$(uname -sr)" "$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)" "$NCORES" "${CPUS[*]}"
    printf 'versions\tOpen MPI %s, MPICH %s, rankwire %s (rankwire-bench built %s), %s\n' "${ver_ompi:-?}" "${ver_mpich:-?}" "$rw_rev" "$rw_built" "$(hyperfine --version 2>/dev/null)"
    printf 'repeats\t%s\n' "$REPEATS"
    printf 'quick\t%s\n' "$QUICK"
    printf 'args\t%s\n' "$BENCH_ARGS"
    printf 'time_args\t%s\n' "$TIME_ARGS"
    printf 'oversub_args\t%s\n' "$OVERSUB_ARGS"
    printf 'oversub_args_slow\t%s\n' "$OVERSUB_ARGS_SLOW"
    printf 'window\t%s\n' "$WINDOW"
    printf 'range\t%s\n' "$RANGE"
    printf 'ncores\t%s\n' "$NCORES"
    printf 'startup_runs\t%s\n' "$STARTUP_RUNS"
    printf 'memcpy_secs\t%s\n' "$MEMCPY_SECS"
    printf 'raw\t%s\n' "$RAW"
    printf 'configs\t%s\n' "$CONFIGS"
    printf 'modes\t%s\n' "$MODES"
    printf 'np_coll\t%s\n' "$NP_COLL"
} >"$OUTDIR/meta.tsv"
{
    printf 'config\tdescription\tnp\tcommand\n'
    for c in "${CONFIG_LIST[@]}"; do
        for np in $(printf '%s\n' "$NP_P2P" "${NPC_LIST[@]}" | sort -un); do
            printf '%s\t%s\t%s\t%s\n' "$c" "$(describe "$c")" "$np" "$(launcher "$c" "$np") $(program "$c" "$np") MODE ..."
        done
    done
} >"$OUTDIR/configs.tsv"

RES=$OUTDIR/results.tsv
RUNS=$OUTDIR/runs.tsv
printf 'rep\tconfig\tmode\tnp\tsize\tvalue\tload1\n' >"$RES"
printf 'rep\tconfig\tmode\tnp\trc\tsecs\tload1\trows\tnote\tcommand\n' >"$RUNS"

load1() { cut -d' ' -f1 /proc/loadavg; }
now() { date +%s.%N; }
clean() { tr '\t\r\n' '   ' | cut -c1-200; }

# last_size MODE: the last size a benchmark prints (powers of two from the
# mode's minimum up to RMAX); empty for barrier
last_size() {
    local lo=$RMIN s
    case $1 in bw) [ "$lo" -ge 1 ] || lo=1 ;; allreduce) [ "$lo" -ge 4 ] || lo=4 ;; barrier) return 0 ;; esac
    [ "$lo" -ge 1 ] || lo=1
    s=$lo
    while [ $((s * 2)) -le "$RMAX" ]; do s=$((s * 2)); done
    [ "$RMAX" -eq 0 ] && s=0
    echo "$s"
}
# run_watched MODE CMD OUT ERR: run CMD under timeout; sets rc (exit status,
# or "hang" when the program printed its last result row and then did not
# exit within GRACE seconds: MPICH through UCX/TCP with 4 ranks on 2 cores
# hangs in MPI_Finalize, for example; such a run is killed, its rows kept)
GRACE=10
run_watched() {
    local mode=$1 cmd=$2 out=$3 err=$4 pid done_at="" pat
    case $mode in
    barrier) pat='^[0-9]+(\.[0-9]+)?([[:space:]]|$)' ;;
    *) pat="^$(last_size "$mode")[[:space:]]+[0-9]" ;;
    esac
    env RWPB_RUN="$RUN_ID" timeout -k 5 "$TIMEOUT" bash -c "exec $cmd" >"$out" 2>"$err" </dev/null &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        if [ -z "$done_at" ]; then
            grep -qE "$pat" "$out" 2>/dev/null && done_at=$SECONDS
        elif [ $((SECONDS - done_at)) -ge "$GRACE" ]; then
            kill -TERM "$pid" 2>/dev/null # timeout passes it on, SIGKILL 5 s later
            wait "$pid" 2>/dev/null
            rc=hang
            return
        fi
        sleep 0.25
    done
    wait "$pid"
    rc=$?
}

# run_one REP CONFIG MODE NP
run_one() {
    local rep=$1 c=$2 mode=$3 np=$4 cmd raw out err rc t0 secs l1 rows note=""
    raw=$RAW/$mode.np$np.$c.r$rep
    cmd=$(bench_cmd "$c" "$mode" "$np")
    l1=$(load1)
    if [ -n "${BROKEN[$c]:-}" ]; then
        printf '%s\t%s\t%s\t%s\tskip\t0\t%s\t0\t%s\t%s\n' "$rep" "$c" "$mode" "$np" "$l1" "${BROKEN[$c]}" "$cmd" >>"$RUNS"
        return
    fi
    if [[ $c == rankwire-set && $mode != bw ]]; then
        printf '%s\t%s\t%s\t%s\tskip\t0\t%s\t0\t%s\t%s\n' "$rep" "$c" "$mode" "$np" "$l1" "rankwire-set differs from rankwire in bw only" "$cmd" >>"$RUNS"
        return
    fi
    if [[ $c == rankwire* && $mode != startup && $RW_MODES != *" $mode "* ]]; then
        printf '%s\t%s\t%s\t%s\tskip\t0\t%s\t0\t%s\t%s\n' "$rep" "$c" "$mode" "$np" "$l1" "rankwire-bench has no $mode mode" "$cmd" >>"$RUNS"
        return
    fi
    out=$raw.out err=$raw.err
    t0=$(now)
    if [ "$mode" = startup ]; then
        env RWPB_RUN="$RUN_ID" timeout -k 5 "$TIMEOUT" hyperfine -N --style basic --warmup 2 --runs "$STARTUP_RUNS" \
            --export-csv "$raw.csv" "$cmd" >"$out" 2>"$err" </dev/null
        rc=$?
        # csv: command,mean,stddev,median,user,system,min,max (seconds); the
        # command may contain commas, so count fields from the end
        [ $rc = 0 ] && [ -s "$raw.csv" ] && awk -F, -v OFS='\t' -v r="$rep" -v c="$c" -v np="$np" -v l="$l1" \
            'NR == 2 { printf "%s\t%s\tstartup\t%s\t-\t%.3f\t%s\n", r, c, np, $(NF-4) * 1000, l }' "$raw.csv" >>"$RES"
        rows=$([ $rc = 0 ] && [ -s "$raw.csv" ] && echo 1 || echo 0)
    else
        run_watched "$mode" "$cmd" "$out" "$err"
        # data rows: a number, then (except barrier) a second number; a header
        # line naming "Size" means the first column is the size
        rows=$(awk -v OFS='\t' -v r="$rep" -v c="$c" -v m="$mode" -v np="$np" -v l="$l1" -v res="$RES" '
            /^#/ { hs = ($0 ~ /[Ss]ize/); next }
            $1 !~ /^[0-9]+(\.[0-9]+)?$/ { next }
            m == "barrier" { v = (hs && NF >= 2) ? $2 : $1
                             if (v ~ /^[0-9.]+$/) { print r, c, m, np, "-", v, l >> res; n++ }; next }
            NF >= 2 && $2 ~ /^[0-9]+(\.[0-9]+)?$/ { print r, c, m, np, $1, $2, l >> res; n++ }
            END { print n + 0 }' "$out")
        # rankwire-bench names the transport it got between ranks 0 and 1
        note=$(grep -m 1 -o 'via [^ ]*' "$out" 2>/dev/null)
    fi
    secs=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
    local adapter
    adapter=$(grep -m 1 '^rankwire-peerbench:' "$err" 2>/dev/null | sed 's/^rankwire-peerbench: //')
    [ -n "$adapter" ] && note="${note:+$note; }$adapter"
    if [ "$rc" = hang ]; then
        note="${note:+$note; }printed all its results, then did not exit within ${GRACE}s: killed (hang at finalize/teardown)"
        say "  !! $c $mode np=$np rep $rep: output complete but still running after ${GRACE}s: killed; raw output in $raw.*"
    elif [ $rc != 0 ]; then
        local last
        last=$(grep -v '^[[:space:]]*$' "$err" "$out" 2>/dev/null | tail -n 1 | sed 's/^[^:]*://')
        [ $rc = 124 ] || [ $rc = 137 ] && last="timed out after ${TIMEOUT}s; $last"
        note="${note:+$note; }$last"
        say "  !! $c $mode np=$np rep $rep: rc=$rc ($(echo "$last" | cut -c1-120)); raw output in $raw.*"
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$c" "$mode" "$np" "$rc" "$secs" "$l1" "$rows" \
        "$(printf '%s' "$note" | clean)" "$cmd" >>"$RUNS"
    # keep raw files small
    [ -f "$err" ] && [ "$(stat -c %s "$err")" -gt 20000 ] && { head -c 10000 "$err" >"$err.tmp"; echo "[... truncated]" >>"$err.tmp"; mv "$err.tmp" "$err"; }
    [ -f "$err" ] && [ ! -s "$err" ] && rm -f "$err"
    sweep
    printf '[rep %s/%s] %-9s np=%s %-13s %6ss  rc=%s load=%s%s\n' "$rep" "$REPEATS" "$mode" "$np" "$c" "$secs" "$rc" "$l1" \
        "$([ -n "$note" ] && echo "  ($note)" | cut -c1-100)" >&2
}

run_memcpy() {
    local rep=$1 out=$RAW/memcpy.r$1.out l1 rc
    l1=$(load1)
    env RWPB_RUN="$RUN_ID" timeout -k 5 120 taskset -c "${CPUS[0]}" $BUILD/memcpybench -t "$MEMCPY_SECS" $MEMCPY_SIZES >"$out" 2>&1
    rc=$?
    awk -v OFS='\t' -v r="$rep" -v l="$l1" -v res="$RES" '/^[0-9]/ {
            print r, "memcpy", "memcpy", 1, $1, $3, l >> res
            print r, "memcpy", "memcpy-best", 1, $1, $2, l >> res }' "$out"
    printf '%s\tmemcpy\tmemcpy\t1\t%s\t-\t%s\t-\t\ttaskset -c %s %s/memcpybench -t %s %s\n' "$rep" "$rc" "$l1" "${CPUS[0]}" "$BUILD" "$MEMCPY_SECS" "$MEMCPY_SIZES" >>"$RUNS"
    # The same into $WINDOW rotating destinations: the working set of the bw test.
    env RWPB_RUN="$RUN_ID" timeout -k 5 120 taskset -c "${CPUS[0]}" $BUILD/memcpybench -t "$MEMCPY_SECS" -w "$WINDOW" $MEMCPY_WINDOW_SIZES >"$out.w" 2>&1
    awk -v OFS='\t' -v r="$rep" -v l="$l1" -v res="$RES" '/^[0-9]/ { split($1, a, "x")
            print r, "memcpy", "memcpy-window", 1, a[1], $3, l >> res
            print r, "memcpy", "memcpy-window-best", 1, a[1], $2, l >> res }' "$out.w"
    printf '[rep %s/%s] memcpy (core %s) rc=%s load=%s\n' "$rep" "$REPEATS" "${CPUS[0]}" "$rc" "$l1" >&2
    sweep
}

# ---- 3./4. run, interleaved ----------------------------------------------------
say "results in $OUTDIR; raw outputs in $RAW"
say "configurations: $CONFIGS; modes: $MODES; repeats: $REPEATS; bw args: $BENCH_ARGS; latency/collective args: $TIME_ARGS (oversubscribed: $OVERSUB_ARGS, MPICH $OVERSUB_ARGS_SLOW)"
ncfg=${#CONFIG_LIST[@]}
for rep in $(seq 1 "$REPEATS"); do
    run_memcpy "$rep"
    for mode in "${MODE_LIST[@]}"; do
        for np in $(nps_for "$mode"); do
            # rotate the order of configurations from repeat to repeat so no
            # configuration always runs right after the same neighbour
            for k in $(seq 0 $((ncfg - 1))); do
                run_one "$rep" "${CONFIG_LIST[$(((k + rep - 1) % ncfg))]}" "$mode" "$np"
            done
        done
    done
done

# ---- 5./6. report --------------------------------------------------------------
elapsed=$(($(date +%s) - T_START))
printf 'elapsed_s\t%s\n' "$elapsed" >>"$OUTDIR/meta.tsv"
timeout -k 5 300 "$PY" $P/report.py "$OUTDIR" || { echo "run.sh: report.py failed" >&2; exit 1; }
[ -s "$NOTES" ] || rm -f "$NOTES"
if [ "$DEFAULT_OUT" = 1 ] && [ "$QUICK" = 0 ]; then
    rm -rf benches/results/latest
    mkdir -p benches/results/latest
    cp -p "$OUTDIR"/* benches/results/latest/ 2>/dev/null
    echo "$OUTDIR" >benches/results/latest/SOURCE
fi
echo
cat "$OUTDIR/table.md"
echo
say "done in ${elapsed}s: $OUTDIR (table.md, results.tsv, runs.tsv, summary.tsv, plot.png)$([ "$DEFAULT_OUT" = 1 ] && [ "$QUICK" = 0 ] && echo '; copied to benches/results/latest/')"
exit 0
}
