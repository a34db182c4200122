#!/usr/bin/env bash
# rsmpi (crate `mpi` 0.8 from crates.io) examples as an outside test suite of the
# standard ABI (issue 20).
#
#   scripts/rsmpi.sh          build the examples with rankwire's mpicc, run under rwrun
#   scripts/rsmpi.sh --ref    the same with MPICH 5.0.2's ABI build (mpicc_abi, mpiexec)
#
# Fetches `mpi` ${RSMPI_VERSION:-0.8.2} with cargo (a scratch project under target/rsmpi),
# copies the unpacked crate (its examples/ and Cargo.lock come with it) to
# target/rsmpi/mpi-<version> as a workspace of its own, and builds every example there
# but the skipped ones with `MPICC=$MPICC cargo build --example E... --features
# derive,complex --keep-going` (mpi-sys reads `$MPICC -show` and runs bindgen over the
# wrapper's mpi.h: it needs libclang, Debian's libclang-dev). Then runs each example under
# `$MPIEXEC -n NP` for NP in ${RSMPI_NP:-2 3 4} (rsmpi's own CI runs them at 2..4), each
# bounded by `timeout ${RSMPI_TIMEOUT:-60}` seconds. Examples in
# ${RSMPI_SKIP:-spawn spawn_multiple} are listed as skipped and not built: they need
# dynamic processes (MPI_Comm_spawn, MPI_Comm_spawn_multiple, and intercommunicators:
# MPI_Comm_remote_size, MPI_Intercomm_merge), which rankwire does not provide.
#
# Binary compatibility (the build directory is ${RSMPI_BUILD_DIR:-target/rsmpi/
# target-$ABI_IMPL}; cargo reuses a build made with the same MPICC):
#   MPICH-built on rankwire: ABI_IMPL=mpich-built MPICC=<mpich>/bin/mpicc_abi
#     ABI_LIBDIR=target/abi-prefix/lib scripts/rsmpi.sh   (rwrun, our library first)
#   rankwire-built on MPICH: MPICC=target/abi-prefix/bin/mpicc ABI_LIBDIR=<mpich>/lib
#     RSMPI_BUILD_DIR=target/rsmpi/target-rankwire scripts/rsmpi.sh --ref
#     (MPICH's mpiexec, MPICH's library first)
# where <mpich> is the wheel's data folder (target/mpich-ref/mpich-5.0.2.data/data
# after a --ref run).
#
# mpi-sys 0.2.4 needs MPI_Fint and MPI_<handle>_c2f/_f2c, absent from the standard ABI:
# when mpi.h lacks MPI_Fint the build maps them to int and _toint/_fromint by -D flags
# (RSMPI_ABI_SHIM=0: no shim, and the build fails). The -D flags of `$MPICC -show` are
# passed to bindgen as well, and its -L directories become the examples' run path
# (build-probe-mpi drops both).
#
# Table (example x ranks: pass/fail/timeout/nobuild/skip) in target/rsmpi/summary.txt;
# logs in target/rsmpi/logs/; exits 1 on any failure unless RSMPI_ALLOW_FAIL=1. When the
# build itself fails (e.g. bindgen cannot read the header), the summary says so with
# the first errors and every example counts as nobuild.
set -euo pipefail
cd "$(dirname "$0")/.."
ABI_SUITE=rsmpi.sh
# shellcheck source=abi-env.sh
. scripts/abi-env.sh

ref=0
for a in "$@"; do
  case "$a" in
    --ref) ref=1 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *) abi_die "unknown argument $a (--ref, --help)" ;;
  esac
done
if [ "$ref" = 1 ]; then abi_use_mpich; else abi_use_ours; fi
abi_describe
start=$SECONDS
version=${RSMPI_VERSION:-0.8.2}
out=$ABI_ROOT/target/rsmpi
logs=$out/logs
mkdir -p "$out" "$logs"
rm -f "$logs"/*.log

# --- fetch -------------------------------------------------------------------------------
crate=$out/mpi-$version
if [ ! -f "$crate/Cargo.toml" ]; then
  fetch=$out/fetch
  mkdir -p "$fetch/src"
  cat >"$fetch/Cargo.toml" <<EOF
[package]
name = "rsmpi-fetch"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
mpi = "=$version"

[workspace]
EOF
  echo 'fn main() {}' >"$fetch/src/main.rs"
  (cd "$fetch" && cargo fetch -q) || abi_die "cargo fetch of mpi $version failed (crates.io unreachable?)"
  srcdir=$(cd "$fetch" && cargo metadata -q --format-version 1 | python3 -c '
import json, os, sys
m = json.load(sys.stdin)
print(next(os.path.dirname(p["manifest_path"]) for p in m["packages"] if p["name"] == "mpi"))')
  [ -d "$srcdir/examples" ] || abi_die "no examples/ in $srcdir"
  rm -rf "$crate.tmp"
  cp -r "$srcdir" "$crate.tmp"
  chmod -R u+w "$crate.tmp"
  printf '\n[workspace]\n' >>"$crate.tmp/Cargo.toml"
  mv "$crate.tmp" "$crate"
fi

# --- build -------------------------------------------------------------------------------
if ! dpkg -s libclang-dev >/dev/null 2>&1 && [ -z "${LIBCLANG_PATH:-}" ] &&
  ! ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1; then
  echo "rsmpi.sh: warning: no libclang found (apt-get install libclang-dev, or set LIBCLANG_PATH); bindgen will fail" >&2
fi
# mpi-sys 0.2.4 (the newest) uses MPI_Fint and MPI_<handle>_c2f/_f2c, which the MPI 5.0
# ABI does not have (its mpi.h leaves Fortran's INTEGER out; it has MPI_<handle>_toint and
# _fromint instead). When the wrapper's mpi.h lacks MPI_Fint, the shim maps them with -D
# flags for both the C shim (CFLAGS) and bindgen (BINDGEN_EXTRA_CLANG_ARGS); rsmpi itself
# is unchanged. RSMPI_ABI_SHIM=0 builds without it.
shim=()
probe=$out/probe-fint.c
printf '#include <mpi.h>\nMPI_Fint rsmpi_probe;\n' >"$probe"
if [ "${RSMPI_ABI_SHIM:-1}" != 0 ] && ! "$MPICC" -fsyntax-only "$probe" >/dev/null 2>&1; then
  shim=(-DMPI_Fint=int)
  for h in Comm Errhandler File Group Info Message Op Request Type Win; do
    shim+=("-DMPI_${h}_c2f=MPI_${h}_toint" "-DMPI_${h}_f2c=MPI_${h}_fromint")
  done
  echo "rsmpi.sh: the wrapper's mpi.h has no MPI_Fint (standard ABI): building with the shim MPI_Fint=int, MPI_<handle>_c2f/f2c -> _toint/_fromint"
fi
# build-probe-mpi hands bindgen only the -I/-L/-l of `$MPICC -show`; its -D flags (MPICH's
# mpicc_abi selects the ABI header with -DMPI_ABI) must reach bindgen too.
# It also drops the wrapper's run path: give the examples one for each -L directory
# (RUNPATH, so that ABI_LIBDIR on LD_LIBRARY_PATH still wins).
defs=()
rustflags=${RUSTFLAGS:-}
for w in $("$MPICC" -show 2>/dev/null); do
  case "$w" in
    -D*) defs+=("$w") ;;
    -L*) rustflags+=" -C link-arg=-Wl,-rpath,${w#-L}" ;;
  esac
done
[ -n "$rustflags" ] && rustflags+=" -C link-arg=-Wl,--enable-new-dtags"
ctarget=${RSMPI_BUILD_DIR:-$out/target-$ABI_IMPL}
skip=" ${RSMPI_SKIP:-spawn spawn_multiple} "
want=()
for src in "$crate"/examples/*.rs; do
  ex=$(basename "$src" .rs)
  [[ "$skip" == *" $ex "* ]] || want+=(--example "$ex")
done
echo "rsmpi.sh: MPICC=$MPICC cargo build of $((${#want[@]} / 2)) examples (log $out/build.log)"
build_ok=1
(cd "$crate" && MPICC=$MPICC CARGO_TARGET_DIR=$ctarget CFLAGS="${CFLAGS:-} ${shim[*]}" RUSTFLAGS="$rustflags" \
  BINDGEN_EXTRA_CLANG_ARGS="${BINDGEN_EXTRA_CLANG_ARGS:-} ${defs[*]} ${shim[*]}" nice cargo build "${want[@]}" \
  --features derive,complex --keep-going -j"${RSMPI_JOBS:-2}" >"$out/build.log" 2>&1) || build_ok=0
build_s=$((SECONDS - start))

# --- run ---------------------------------------------------------------------------------
read -r -a nps <<<"${RSMPI_NP:-2 3 4}"
tmo=${RSMPI_TIMEOUT:-60}
run_env=$(abi_run_env)
declare -A result
examples=()
npass=0 nfail=0 nskip=0
notes=()
if [ "$build_ok" = 0 ]; then
  notes+=("the build failed; first errors: $(grep -m5 -E '^error' "$out/build.log" | tr '\n' ' ' | cut -c1-600) (log $out/build.log)")
fi
for src in "$crate"/examples/*.rs; do
  ex=$(basename "$src" .rs)
  examples+=("$ex")
  bin=$ctarget/debug/examples/$ex
  for np in "${nps[@]}"; do
    if [[ "$skip" == *" $ex "* ]]; then
      result[$ex,$np]=skip
      nskip=$((nskip + 1))
      continue
    fi
    if [ ! -x "$bin" ]; then
      result[$ex,$np]=nobuild
      nfail=$((nfail + 1))
      continue
    fi
    log=$logs/$ex-n$np.log
    echo "+ $MPIEXEC -n $np $bin" >"$log"
    rc=0
    timeout -k 10 "$tmo" env "$run_env" "$MPIEXEC" -n "$np" "$bin" >>"$log" 2>&1 </dev/null || rc=$?
    if [ "$rc" = 0 ]; then
      result[$ex,$np]=pass
      npass=$((npass + 1))
    else
      r=fail
      if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then r=timeout; fi
      result[$ex,$np]=$r
      nfail=$((nfail + 1))
      notes+=("$ex -n $np: $r (exit $rc), log $log: $(grep -v '^+ ' "$log" | tail -2 | tr '\n' ' ' | cut -c1-300)")
    fi
  done
done
for ex in "${examples[@]}"; do
  if [ ! -x "$ctarget/debug/examples/$ex" ] && [[ "$skip" != *" $ex "* ]] && [ "$build_ok" = 0 ]; then
    e=$(grep -A3 -E "^error.*(example \"$ex\"|examples/$ex\.rs)" "$out/build.log" | head -4 | tr '\n' ' ' | cut -c1-300 || true)
    [ -n "$e" ] && notes+=("$ex: did not build: $e")
  fi
done

{
  echo "# rsmpi (mpi $version) examples on $ABI_IMPL, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "# MPICC=$MPICC MPIEXEC=$MPIEXEC${ABI_LIBDIR:+ ABI_LIBDIR=$ABI_LIBDIR}; timeout ${tmo}s; skipped: ${skip# }"
  [ ${#shim[@]} -gt 0 ] && echo "# built with the MPI_Fint/c2f shim (mpi-sys 0.2.4 needs them; the MPI 5.0 ABI has _toint/_fromint)"
  printf '%-32s' example
  for np in "${nps[@]}"; do printf ' %-8s' "np=$np"; done
  echo
  for ex in "${examples[@]}"; do
    printf '%-32s' "$ex"
    for np in "${nps[@]}"; do printf ' %-8s' "${result[$ex,$np]}"; done
    echo
  done
  for n in "${notes[@]}"; do echo "# $n"; done
  for np in "${nps[@]}"; do
    line="# np=$np:"
    for r in pass fail timeout nobuild skip; do
      c=0
      for ex in "${examples[@]}"; do [ "${result[$ex,$np]}" = "$r" ] && c=$((c + 1)); done
      line+=" $r $c"
    done
    echo "$line"
  done
  echo "# pass $npass, fail $nfail, skip $nskip; build ${build_s}s, runs $((SECONDS - start - build_s))s, total $((SECONDS - start))s"
} | tee "$out/summary.txt"

if [ "$nfail" -gt 0 ] && [ "${RSMPI_ALLOW_FAIL:-0}" != 1 ]; then
  echo "rsmpi.sh: $nfail run(s) failed (RSMPI_ALLOW_FAIL=1 to report without failing)" >&2
  exit 1
fi
