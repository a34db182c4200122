#!/usr/bin/env bash
# benches/peers/osu-abi.sh: the OSU micro-benchmarks through the MPI standard ABI, on
# rankwire's libmpi_abi.so.1 and on MPICH's, against Open MPI and MPICH built natively
# and against rankwire-bench, in one interleaved run (issue 20, "Benchmarks").
# See benches/README.md ("OSU through the standard ABI").
#
#   benches/peers/osu-abi.sh        full run (3 repeats, about 15 min on 2 cores)
#   benches/peers/osu-abi.sh -q     smoke run (few iterations, 1 repeat)
#
# Configurations (osu_latency osu_bw osu_bibw at 2 ranks; osu_allreduce osu_bcast
# osu_barrier osu_alltoall at 2 and 4 ranks):
#   rw-abi      OSU 7.2 built once with rankwire's standard-ABI mpicc (a release
#               scripts/install.sh into build/osu-abi/prefix), run under rwrun with
#               LD_LIBRARY_PATH at that prefix's lib
#   mpich-abi   the same OSU binaries, LD_LIBRARY_PATH at MPICH 5.0.2's standard-ABI
#               build (PyPI wheel, as scripts/abi-env.sh fetches it), its mpiexec
#   ompi        OSU built with mpicc.openmpi, mpirun.openmpi (ob1, btl self,vader)
#   mpich       OSU built with mpicc.mpich, mpirun.mpich (Debian's ch4:ucx)
#   rw-bench    rankwire-bench (the native Rust benchmark), same modes and sizes; its
#               collectives with --barrier-each, OSU's loop (each call timed alone, an
#               untimed MPI_Barrier after it; barrier: each call timed alone; before
#               2026-12-06, and for barrier before 2026-12-07, they ran back to back,
#               which is not what OSU measures)
#   rw-abi-base the rw-abi OSU binaries on the library and rwrun of another rankwire
#               build: RW_ABI_BASE=DIR, a prefix made by `scripts/install.sh --prefix
#               DIR` in a checkout of the commit to compare with (before/after ratios
#               of a change in the same interleaved run; not in the default list)
# Ranks are bound to cores as run.sh binds them (none when ranks > cores). Which
# library each configuration really loaded is checked before the run (libver.c under
# the same launcher and environment, and LD_DEBUG=libs of one OSU run) and written to
# libs.tsv.
#
# Iterations follow rankwire-bench's rule so that both sides do the same work:
# OSU runs twice per cell, sizes up to 8 KiB with -i I -x W, above with the large
# counts (point-to-point max(I/10, 20), bw/bibw windows (iters/10)+1 as rankwire-bench
# counts them; collectives above 8 KiB: I/10, where rankwire-bench scales by
# 8192/size, at least 10).
#
# Receive buffers of osu_bw/osu_bibw windows: OSU's default is one buffer for the whole
# window; rankwire-bench then runs with --recv-buffers single, the same loop.
# OSU_BW_BUFS=multiple gives OSU `-b multiple` (a buffer per window slot) and
# rankwire-bench its default (--recv-buffers window).
#
# Options:
#   -q        smoke run (output under benches/results/tmp/)
#   -r N      repeats (default 3)
#   -o DIR    output directory (default benches/results/<date>_osu-abi)
#   -m MAX    largest message size in bytes (default 1048576)
#   -c LIST   configurations (default rw-abi,mpich-abi,ompi,mpich,rw-bench)
#   -b LIST   benchmarks (default latency,bw,bibw,allreduce,bcast,barrier,alltoall)
#   -N LIST   ranks for the collectives (default 2,4)
#   -t SECS   timeout of one run (default 120)
#   -l        print the command lines and exit
#   -h        this help
set -u -o pipefail
{

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT" || exit 1
P=benches/peers
B=$P/build/osu-abi

CONFIGS="rw-abi,mpich-abi,ompi,mpich,rw-bench"
BENCHES="latency,bw,bibw,allreduce,bcast,barrier,alltoall"
NP_COLL="2,4"
REPEATS=3
OUTDIR=""
MAX=""
TIMEOUT=120
QUICK=0
LIST_ONLY=0
# iterations (small sizes; the large ones are derived) per case
LAT_I=5000 LAT_W=500     # latency, 2 ranks
BW_I=1000 BW_W=100       # bw, bibw: rankwire-bench --iters (windows = iters/10 + 1)
COLL_I=5000 COLL_W=500   # collectives, 2 ranks
OVS_I=500 OVS_W=50       # collectives, ranks > cores
OVS_SLOW_I=50 OVS_SLOW_W=5 # the same for MPICH (it spins; a time slice per step)

usage() { sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
while getopts "qr:o:m:c:b:N:t:lh" opt; do
    case $opt in
    q) QUICK=1 ;;
    r) REPEATS=$OPTARG ;;
    o) OUTDIR=$OPTARG ;;
    m) MAX=$OPTARG ;;
    c) CONFIGS=$OPTARG ;;
    b) BENCHES=$OPTARG ;;
    N) NP_COLL=$OPTARG ;;
    t) TIMEOUT=$OPTARG ;;
    l) LIST_ONLY=1 ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
done
if [ "$QUICK" = 1 ]; then
    REPEATS=1 LAT_I=200 LAT_W=20 BW_I=100 BW_W=10 COLL_I=200 COLL_W=20 OVS_I=20 OVS_W=2
    OVS_SLOW_I=10 OVS_SLOW_W=1 MAX=${MAX:-65536}
fi
MAX=${MAX:-1048576}
IFS=, read -ra CONFIG_LIST <<<"$CONFIGS"
IFS=, read -ra BENCH_LIST <<<"$BENCHES"
IFS=, read -ra NPC_LIST <<<"$NP_COLL"

read -ra CPUS <<<"$(taskset -pc $$ 2>/dev/null | sed 's/.*: *//' | tr ',' '\n' |
    awk -F- 'NF == 2 { for (i = $1; i <= $2; i++) print i; next } { print }' | tr '\n' ' ')"
[ ${#CPUS[@]} -gt 0 ] || CPUS=(0)
NCORES=${#CPUS[@]}
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

PREFIX=$ROOT/$B/prefix
MPICH_ABI=$ROOT/target/mpich-ref/mpich-5.0.2.data/data
RW_BENCH=$ROOT/$B/rankwire-bench
OMPI_RUN="mpirun.openmpi --oversubscribe --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo"
MPICH_RUN="mpirun.mpich -iface lo"

# launcher CONFIG NP
launcher() {
    local c=$1 np=$2 bind=1 ob mb wrap=""
    [ "$np" -le "$NCORES" ] || bind=0
    if [ $bind = 1 ]; then
        ob="--map-by core --bind-to core" mb="-bind-to core" wrap="$P/bind-local-rank.sh "
    else ob="--bind-to none" mb="-bind-to none"; fi
    case $c in
    rw-abi) echo "env LD_LIBRARY_PATH=$PREFIX/lib $PREFIX/bin/rwrun -n $np $wrap" ;;
    rw-bench) echo "$PREFIX/bin/rwrun -n $np $wrap" ;;
    rw-abi-base) echo "env LD_LIBRARY_PATH=$RW_ABI_BASE/lib $RW_ABI_BASE/bin/rwrun -n $np $wrap" ;;
    mpich-abi) echo "env LD_LIBRARY_PATH=$MPICH_ABI/lib $MPICH_ABI/bin/mpiexec -n $np $mb " ;;
    ompi) echo "$OMPI_RUN -n $np $ob --mca pml ob1 --mca btl self,vader " ;;
    mpich) echo "env UCX_NET_DEVICES=lo $MPICH_RUN -n $np $mb " ;;
    esac
}
osu_dir() { case $1 in rw-abi | rw-abi-base | mpich-abi) echo "$B/osu-abi" ;; ompi) echo "$B/osu-ompi" ;; mpich) echo "$B/osu-mpich" ;; esac; }
osu_path() { case $1 in latency | bw | bibw) echo "c/mpi/pt2pt/standard/osu_$1" ;; *) echo "c/mpi/collective/blocking/osu_$1" ;; esac; }
minsize() { case $1 in latency) echo 1 ;; bw | bibw) echo 1 ;; allreduce) echo 4 ;; *) echo 1 ;; esac; }
is_coll() { case $1 in latency | bw | bibw) return 1 ;; esac; return 0; }
nps_for() { if is_coll "$1"; then echo "${NPC_LIST[@]}"; else echo 2; fi; }
slow() { case $1 in mpich | mpich-abi) return 0 ;; esac; return 1; }
# iters CONFIG BENCH NP -> "I W" of the small sizes as rankwire-bench --iters/--warmup
iters() {
    local c=$1 b=$2 np=$3
    if ! is_coll "$b"; then
        case $b in latency) echo "$LAT_I $LAT_W" ;; *) echo "$BW_I $BW_W" ;; esac
    elif [ "$np" -gt "$NCORES" ]; then
        if slow "$c"; then echo "$OVS_SLOW_I $OVS_SLOW_W"; else echo "$OVS_I $OVS_W"; fi
    else echo "$COLL_I $COLL_W"; fi
}
max2() { [ "$1" -ge "$2" ] && echo "$1" || echo "$2"; }
# osu_args BENCH I W BAND(small|large) -> OSU options
osu_args() {
    local b=$1 i=$2 w=$3 band=$4 lo hi
    lo=$(minsize "$b") hi=$MAX
    if [ "$band" = small ]; then [ "$hi" -gt 8192 ] && hi=8192; else lo=16384; fi
    if [ "$band" = large ]; then
        if is_coll "$b"; then i=$(max2 $((i / 10)) 10) w=$(max2 $((w / 10)) 2)
        else i=$(max2 $((i / 10)) 20) w=$(max2 $((w / 10)) 2); fi
    fi
    # bw, bibw: windows as rankwire-bench counts them; with OSU_BW_BUFS=multiple each
    # window slot gets its own buffer, as in rankwire-bench (OSU's default, single,
    # posts every slot into one buffer, which stays in cache)
    case $b in bw | bibw) i=$((i / 10 + 1)) w=$((w / 10 + 1)) ;; esac
    case $b in bw | bibw) [ -n "${OSU_BW_BUFS:-}" ] && w="$w -b $OSU_BW_BUFS" ;; esac
    # osu_allreduce sums MPI_CHAR unless told (OSU 7.2's default type); rankwire-bench
    # sums f32 (Size/4 elements): -T mpi_float makes both do the same reduction
    case $b in
    barrier) echo "-i $i -x $w" ;;
    allreduce) echo "-m $lo:$hi -i $i -x $w -T mpi_float" ;;
    *) echo "-m $lo:$hi -i $i -x $w" ;;
    esac
}
# cmds CONFIG BENCH NP: one command line per line (OSU: small band, then large band)
cmds() {
    local c=$1 b=$2 np=$3 i w
    read -r i w <<<"$(iters "$c" "$b" "$np")"
    if [ "$c" = rw-bench ]; then
        if [ "$b" = barrier ]; then
            # Each call timed alone (osu_barrier 7.2's loop: t_start, MPI_Barrier,
            # t_stop; before 2026-12-07 rankwire-bench timed the loop as a whole).
            echo "$(launcher "$c" "$np")$RW_BENCH barrier --iters $i --warmup $w --barrier-each"
        else
            # Collectives timed as OSU times them (each call alone, a barrier after
            # it: --barrier-each); bw/bibw with OSU's receive buffers (see the header).
            local extra=""
            is_coll "$b" && extra=" --barrier-each"
            case $b in bw | bibw) [ "${OSU_BW_BUFS:-}" = multiple ] || extra=" --recv-buffers single" ;; esac
            echo "$(launcher "$c" "$np")$RW_BENCH $b --min-size $(minsize "$b") --max-size $MAX --iters $i --warmup $w$extra"
        fi
        return
    fi
    local bin
    bin=$(osu_dir "$c")/$(osu_path "$b")
    echo "$(launcher "$c" "$np")$bin $(osu_args "$b" "$i" "$w" small)"
    [ "$b" != barrier ] && [ "$MAX" -gt 8192 ] && echo "$(launcher "$c" "$np")$bin $(osu_args "$b" "$i" "$w" large)"
    return 0
}

if [ "$LIST_ONLY" = 1 ]; then
    for c in "${CONFIG_LIST[@]}"; do
        for b in "${BENCH_LIST[@]}"; do
            for np in $(nps_for "$b"); do cmds "$c" "$b" "$np" | sed "s/^/$c $b np=$np: /"; done
        done
    done
    exit 0
fi

STAMP=$(date +%Y-%m-%d_%H%M%S)
if [ -z "$OUTDIR" ]; then
    if [ "$QUICK" = 1 ]; then OUTDIR=benches/results/tmp/osu-abi-quick-$STAMP; else OUTDIR=benches/results/$(date +%F)_osu-abi; fi
fi
RAW=benches/results/tmp/osu-abi-raw-$STAMP
mkdir -p "$OUTDIR" "$RAW" "$B" || exit 1
LOG=$B/setup.log
: >"$LOG"
say() { echo "osu-abi.sh: $*" >&2; }
die() { say "$*"; exit 1; }

# leftovers: every command carries RWPB_RUN; what still carries it afterwards is killed
RUN_ID="osu-$$-$STAMP"
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

# ---- 1. install what is missing (as run.sh) ----------------------------------------
have() { command -v "$1" >/dev/null 2>&1; }
find_py() {
    local p
    for p in python3 /usr/bin/python3 "$P/build/venv/bin/python"; do
        if have "$p" && "$p" -c 'import matplotlib' >/dev/null 2>&1; then echo "$p"; return 0; fi
    done
    return 1
}
pkgs=()
{ have mpirun.openmpi && have mpicc.openmpi; } || pkgs+=(openmpi-bin libopenmpi-dev)
{ have mpirun.mpich && have mpicc.mpich; } || pkgs+=(mpich libmpich-dev)
have make || pkgs+=(make)
find_py >/dev/null || pkgs+=(python3-matplotlib)
if [ ${#pkgs[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo -n"
    say "installing ${pkgs[*]} (apt-get; log in $LOG)"
    { timeout -k 5 600 $SUDO apt-get update -q &&
        DEBIAN_FRONTEND=noninteractive timeout -k 5 1200 $SUDO apt-get install -y -q --no-install-recommends "${pkgs[@]}"; } >>"$LOG" 2>&1 ||
        say "apt-get install ${pkgs[*]} failed (see $LOG)"
fi
PY=$(find_py) || PY=python3

# ---- 2. build ------------------------------------------------------------------------
# rankwire: a release install (library, mpicc, rwrun) into the private prefix: a
# snapshot that a cargo build elsewhere cannot change mid-run
say "scripts/install.sh --prefix $PREFIX (release; log in $LOG)"
timeout -k 5 3600 nice bash scripts/install.sh --prefix "$PREFIX" >>"$LOG" 2>&1 || die "scripts/install.sh failed (see $LOG)"
timeout -k 5 3600 nice cargo build --release -p rankwire-bench >>"$LOG" 2>&1 || die "cargo build -p rankwire-bench failed (see $LOG)"
cp -f target/release/rankwire-bench "$RW_BENCH" && touch -r target/release/rankwire-bench "$RW_BENCH"
# MPICH's standard-ABI build (scripts/abi-env.sh downloads it with pip when missing)
ABI_SUITE=osu-abi.sh
# shellcheck source=../../scripts/abi-env.sh
. scripts/abi-env.sh
MPICH_ABI=$(abi_mpich_dir) || die "no MPICH standard-ABI build"

TARBALL=${OSU_TARBALL:-../shared/vendor/osu-micro-benchmarks-7.2.tar.gz}
[ -f "$TARBALL" ] || die "the OSU 7.2 tarball is not at $TARBALL (set OSU_TARBALL)"
# build_osu DIR CC: configure OSU once in DIR with CC, make the seven benchmarks
build_osu() {
    local d=$1 cc=$2 cxx=$3 key
    key="$(cksum <"$TARBALL" | cut -d' ' -f1) $cc"
    if [ ! -f "$d/.configured" ] || [ "$(cat "$d/.configured")" != "$key" ]; then
        rm -rf "$d" && mkdir -p "$d" && tar xzf "$TARBALL" -C "$d" --strip-components=1 || return 1
        (cd "$d" && ./configure CC="$cc" CXX="$cxx" >configure.log 2>&1) || { say "configure with $cc failed: $d/configure.log"; return 1; }
        echo "$key" >"$d/.configured"
    fi
    (cd "$d/c/mpi/pt2pt/standard" && nice make -j2 osu_latency osu_bw osu_bibw) >>"$d/make.log" 2>&1 &&
        (cd "$d/c/mpi/collective/blocking" && nice make -j2 osu_allreduce osu_bcast osu_barrier osu_alltoall) >>"$d/make.log" 2>&1
}
say "building OSU 7.2 (standard ABI: $PREFIX/bin/mpicc; mpicc.openmpi; mpicc.mpich)"
declare -A BROKEN=()
build_osu "$B/osu-abi" "$PREFIX/bin/mpicc" "$PREFIX/bin/mpicxx" || { BROKEN[rw-abi]="OSU build failed"; BROKEN[mpich-abi]="OSU build failed"; BROKEN[rw-abi-base]="OSU build failed"; }
if [[ ",$CONFIGS," == *,rw-abi-base,* ]]; then
    if [ -z "${RW_ABI_BASE:-}" ] || [ ! -f "$RW_ABI_BASE/lib/libmpi_abi.so.1" ] || [ ! -x "$RW_ABI_BASE/bin/rwrun" ]; then
        say "rw-abi-base: RW_ABI_BASE (${RW_ABI_BASE:-unset}) is not a prefix of scripts/install.sh (lib/libmpi_abi.so.1, bin/rwrun); skipping it"
        BROKEN[rw-abi-base]="RW_ABI_BASE is not an install prefix"
    fi
fi
build_osu "$B/osu-ompi" mpicc.openmpi mpicxx.openmpi || BROKEN[ompi]="OSU build failed"
build_osu "$B/osu-mpich" mpicc.mpich mpicxx.mpich || BROKEN[mpich]="OSU build failed"
"$PREFIX/bin/mpicc" -O2 -o "$B/libver.abi" $P/libver.c -ldl >>"$LOG" 2>&1 || die "libver.c with our mpicc failed"
mpicc.openmpi -O2 -o "$B/libver.ompi" $P/libver.c -ldl >>"$LOG" 2>&1
mpicc.mpich -O2 -o "$B/libver.mpich" $P/libver.c -ldl >>"$LOG" 2>&1

# ---- 3. which library each configuration loads -------------------------------------
LIBS=$OUTDIR/libs.tsv
printf 'config\tnp\tlibver (MPI_Get_library_version, dladdr(MPI_Init))\tLD_DEBUG of osu_barrier: libmpi loaded\n' >"$LIBS"
for c in "${CONFIG_LIST[@]}"; do
    [ "$c" = rw-bench ] && continue
    [ -n "${BROKEN[$c]:-}" ] && continue
    case $c in rw-abi | rw-abi-base | mpich-abi) lv=$B/libver.abi ;; ompi) lv=$B/libver.ompi ;; mpich) lv=$B/libver.mpich ;; esac
    v=$(env RWPB_RUN="$RUN_ID" timeout -k 5 60 bash -c "exec $(launcher "$c" 2)$lv" 2>&1 </dev/null | grep -m1 '^size=' | tr '\t' ' ')
    # the OSU binary itself: the dynamic loader's own list of what it loaded (rank 0)
    d=$(env RWPB_RUN="$RUN_ID" LD_DEBUG=libs LD_DEBUG_OUTPUT=$RAW/lddebug.$c timeout -k 5 60 bash -c \
        "exec $(launcher "$c" 2)$(osu_dir "$c")/$(osu_path barrier) -i 10 -x 1" >/dev/null 2>&1 </dev/null
        grep -h 'calling init: .*libmpi' $(grep -l "osu_barrier" "$RAW"/lddebug.$c.* 2>/dev/null) 2>/dev/null | sed 's/.*calling init: //' | sort -u | tr '\n' ' ')
    printf '%s\t2\t%s\t%s\n' "$c" "${v:-?}" "${d:-?}" >>"$LIBS"
    sweep
    say "$c: ${v:-no output}; OSU loaded: ${d:-?}"
done
case $(grep -P '^rw-abi\t' "$LIBS") in *"$PREFIX/lib/libmpi_abi.so.1"*rankwire*"$PREFIX/lib/libmpi_abi.so.1"*) ;; *) say "WARNING: rw-abi did not load $PREFIX/lib/libmpi_abi.so.1 (see $LIBS)" ;; esac
case $(grep -P '^mpich-abi\t' "$LIBS") in *"$MPICH_ABI/lib/libmpi_abi.so.1"*MPICH*"$MPICH_ABI/lib/libmpi_abi.so.1"*) ;; *) say "WARNING: mpich-abi did not load $MPICH_ABI/lib/libmpi_abi.so.1 (see $LIBS)" ;; esac

# ---- metadata ----------------------------------------------------------------------
{
    printf 'date\t%s\n' "$(date -u +'%F %H:%M UTC')"
    printf 'host\t%s, %s, %s CPUs usable (%s)\n' "$(uname -sr)" "$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)" "$NCORES" "${CPUS[*]}"
    printf 'versions\tOSU 7.2, Open MPI %s, MPICH %s (Debian), MPICH %s (standard ABI, PyPI wheel), rankwire %s (library and rankwire-bench built %s)\n' \
        "$(mpirun.openmpi --version 2>/dev/null | head -n 1 | sed 's/.*) //')" "$(mpirun.mpich --version 2>/dev/null | sed -n 's/^ *Version: *//p' | head -n 1)" \
        "$("$MPICH_ABI/bin/mpichversion" 2>/dev/null | sed -n 's/^MPICH Version: *//p')" "$(git rev-parse --short HEAD 2>/dev/null)" "$(date -u -r "$RW_BENCH" +%FT%TZ)"
    printf 'repeats\t%s\n' "$REPEATS"
    printf 'quick\t%s\n' "$QUICK"
    printf 'max\t%s\n' "$MAX"
    printf 'iters\tlatency %s/%s, bw %s/%s, collectives %s/%s, oversubscribed %s/%s (MPICH %s/%s)\n' \
        "$LAT_I" "$LAT_W" "$BW_I" "$BW_W" "$COLL_I" "$COLL_W" "$OVS_I" "$OVS_W" "$OVS_SLOW_I" "$OVS_SLOW_W"
    printf 'ncores\t%s\n' "$NCORES"
    printf 'osu_bw_bufs\t%s\n' "${OSU_BW_BUFS:-single (OSU default)}"
    printf 'configs\t%s\n' "$CONFIGS"
    printf 'raw\t%s\n' "$RAW"
} >"$OUTDIR/meta.tsv"

RES=$OUTDIR/results.tsv
RUNS=$OUTDIR/runs.tsv
printf 'rep\tconfig\tbench\tnp\tsize\tvalue\tload1\n' >"$RES"
printf 'rep\tconfig\tbench\tnp\trc\tsecs\tload1\trows\tcommand\n' >"$RUNS"
load1() { cut -d' ' -f1 /proc/loadavg; }

# run_watched CMD OUT ERR LASTPAT: as run.sh, a run that printed its last row and then
# does not exit within GRACE seconds is killed and marked hang (its rows are kept)
GRACE=10
run_watched() {
    local cmd=$1 out=$2 err=$3 pat=$4 pid done_at=""
    env RWPB_RUN="$RUN_ID" timeout -k 5 "$TIMEOUT" bash -c "exec $cmd" >"$out" 2>"$err" </dev/null &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        if [ -z "$done_at" ]; then
            grep -qE "$pat" "$out" 2>/dev/null && done_at=$SECONDS
        elif [ $((SECONDS - done_at)) -ge "$GRACE" ]; then
            kill -TERM "$pid" 2>/dev/null
            wait "$pid" 2>/dev/null
            rc=hang
            return
        fi
        sleep 0.2
    done
    wait "$pid"
    rc=$?
}
last_of() { # CMD -> regex of its last data row
    local m
    case $1 in *barrier*) echo '^[[:space:]]*[0-9]+\.[0-9]+'; return ;; esac
    m=$(echo "$1" | sed -n 's/.*-m [0-9]*:\([0-9]*\).*/\1/p')
    [ -n "$m" ] || m=$(echo "$1" | sed -n 's/.*--max-size \([0-9]*\).*/\1/p')
    echo "^$m[[:space:]]+[0-9]"
}

run_one() { # REP CONFIG BENCH NP
    local rep=$1 c=$2 b=$3 np=$4 k=0 cmd out err secs l1 rows t0
    if [ -n "${BROKEN[$c]:-}" ]; then
        printf '%s\t%s\t%s\t%s\tskip\t0\t-\t0\t%s\n' "$rep" "$c" "$b" "$np" "${BROKEN[$c]}" >>"$RUNS"
        return
    fi
    while IFS= read -r cmd; do
        k=$((k + 1))
        out=$RAW/$b.np$np.$c.r$rep.$k.out err=${out%.out}.err
        l1=$(load1)
        t0=$(date +%s.%N)
        run_watched "$cmd" "$out" "$err" "$(last_of "$cmd")"
        secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
        rows=$(awk -v OFS='\t' -v r="$rep" -v c="$c" -v m="$b" -v np="$np" -v l="$l1" -v res="$RES" '
            /^#/ { next }
            $1 !~ /^[0-9]+(\.[0-9]+)?$/ { next }
            m == "barrier" { print r, c, m, np, "-", $1, l >> res; n++; next }
            NF >= 2 && $2 ~ /^[0-9]+(\.[0-9]+)?$/ { print r, c, m, np, $1, $2, l >> res; n++ }
            END { print n + 0 }' "$out")
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$c" "$b" "$np" "$rc" "$secs" "$l1" "$rows" "$cmd" >>"$RUNS"
        [ "$rc" = 0 ] || say "  !! $c $b np=$np rep $rep: rc=$rc ($(grep -v '^[[:space:]]*$' "$err" "$out" 2>/dev/null | tail -n 1 | cut -c1-160)); raw in $out"
        [ -f "$err" ] && [ ! -s "$err" ] && rm -f "$err"
        sweep
        printf '[rep %s/%s] %-9s np=%s %-9s %5ss rc=%s rows=%s load=%s\n' "$rep" "$REPEATS" "$b" "$np" "$c" "$secs" "$rc" "$rows" "$l1" >&2
    done < <(cmds "$c" "$b" "$np")
}

# ---- 4. run, interleaved: per cell every configuration back to back, the order rotating
T_START=$(date +%s)
say "results in $OUTDIR; raw outputs in $RAW"
ncfg=${#CONFIG_LIST[@]}
for rep in $(seq 1 "$REPEATS"); do
    for b in "${BENCH_LIST[@]}"; do
        for np in $(nps_for "$b"); do
            for k in $(seq 0 $((ncfg - 1))); do
                run_one "$rep" "${CONFIG_LIST[$(((k + rep - 1) % ncfg))]}" "$b" "$np"
            done
        done
    done
done
printf 'elapsed_s\t%s\n' "$(($(date +%s) - T_START))" >>"$OUTDIR/meta.tsv"

# ---- 5. report ---------------------------------------------------------------------
timeout -k 5 300 "$PY" $P/osu-report.py "$OUTDIR" || die "osu-report.py failed"
cat "$OUTDIR/table.md"
say "done in $(($(date +%s) - T_START))s: $OUTDIR"
exit 0
}
