# shellcheck shell=bash
# Sourced by scripts/osu.sh, scripts/mpi4py.sh and scripts/rsmpi.sh (the outside test
# suites of the standard ABI, issue 20): picks the MPI implementation they build with and
# run on, from variables, so that one script runs rankwire's libmpi_abi.so.1 or MPICH's.
#
#   MPICC, MPICXX   compiler wrappers (C, C++). Default: rankwire's, after
#                   `scripts/install.sh --debug --prefix target/abi-prefix`.
#   MPIEXEC         launcher, called as `$MPIEXEC -n N PROGRAM ARGS...`. Default: the
#                   prefix's `mpiexec` (rwrun), else target/debug/rwrun (built here).
#   ABI_LIBDIR      optional: a directory put first on LD_LIBRARY_PATH for every run
#                   (swap the libmpi_abi.so.1 a program finds: binary compatibility).
#   ABI_IMPL        a label for the outputs (default: rankwire with the default wrappers,
#                   custom with MPICC given, mpich for --ref)
#   MPICH_ABI_DIR   MPICH 5.0.2's standard-ABI build (the `data` folder of PyPI's
#                   `mpich` wheel, holding bin/ lib/ include/). Default: downloaded by pip
#                   into target/mpich-ref when `abi_use_mpich` needs it.
#
# Functions: `abi_use_ours` / `abi_use_mpich` set and export MPICC, MPICXX, MPIEXEC
# (variables already set win); `abi_describe` prints one line saying what was chosen;
# `abi_run_env` prints the LD_LIBRARY_PATH assignment runs need (for `env`).

ABI_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ABI_PREFIX=${ABI_PREFIX:-$ABI_ROOT/target/abi-prefix}
ABI_IMPL=${ABI_IMPL:-}

abi_die() {
  echo "$ABI_SUITE: $*" >&2
  exit 2
}

# rwrun of this checkout (debug build; cargo does nothing when it is up to date).
abi_rwrun() {
  (cd "$ABI_ROOT" && cargo build -q -p rankwire-mpirun) >&2 ||
    abi_die "building rwrun failed (cargo build -p rankwire-mpirun)"
  echo "$ABI_ROOT/target/debug/rwrun"
}

abi_use_ours() {
  if [ -n "${MPICC:-}" ]; then
    ABI_IMPL=${ABI_IMPL:-custom}
  else
    ABI_IMPL=${ABI_IMPL:-rankwire}
    if [ ! -f "$ABI_ROOT/scripts/install.sh" ]; then
      abi_die "rankwire's mpicc is not in this checkout yet (no scripts/install.sh); set MPICC (e.g. MPICH's mpicc_abi) or pass --ref for MPICH"
    fi
    if [ "${ABI_PREFIX_INSTALLED:-}" != "$ABI_PREFIX" ]; then
      echo "$ABI_SUITE: scripts/install.sh --debug --prefix $ABI_PREFIX" >&2
      bash "$ABI_ROOT/scripts/install.sh" --debug --prefix "$ABI_PREFIX" >&2 ||
        abi_die "scripts/install.sh --debug --prefix $ABI_PREFIX failed"
      export ABI_PREFIX_INSTALLED=$ABI_PREFIX
    fi
    MPICC=$ABI_PREFIX/bin/mpicc
    [ -x "$MPICC" ] || abi_die "$MPICC missing after scripts/install.sh"
    MPICXX=${MPICXX:-$ABI_PREFIX/bin/mpicxx}
    if [ -z "${MPIEXEC:-}" ] && [ -x "$ABI_PREFIX/bin/mpiexec" ]; then
      MPIEXEC=$ABI_PREFIX/bin/mpiexec
    fi
  fi
  if [ -z "${MPICXX:-}" ]; then
    case "$MPICC" in
      *mpicc_abi) MPICXX=${MPICC%mpicc_abi}mpicxx_abi ;;
      *mpicc) MPICXX=${MPICC%mpicc}mpicxx ;;
      *) MPICXX=$MPICC ;;
    esac
  fi
  if [ -z "${MPIEXEC:-}" ]; then
    MPIEXEC=$(abi_rwrun) || exit 2
  fi
  export MPICC MPICXX MPIEXEC ABI_IMPL
}

# MPICH 5.0.2's standard-ABI build (PyPI `mpich`), the reference implementation.
abi_mpich_dir() {
  if [ -n "${MPICH_ABI_DIR:-}" ]; then
    [ -x "$MPICH_ABI_DIR/bin/mpicc_abi" ] || chmod +x "$MPICH_ABI_DIR"/bin/* 2>/dev/null || true
    [ -f "$MPICH_ABI_DIR/lib/libmpi_abi.so.1" ] || abi_die "MPICH_ABI_DIR=$MPICH_ABI_DIR has no lib/libmpi_abi.so.1"
    echo "$MPICH_ABI_DIR"
    return
  fi
  local ref=$ABI_ROOT/target/mpich-ref
  local data=$ref/mpich-5.0.2.data/data
  if [ ! -f "$data/lib/libmpi_abi.so.1" ]; then
    mkdir -p "$ref"
    echo "$ABI_SUITE: pip download mpich==5.0.2 (MPICH's standard-ABI build, reference)" >&2
    python3 -m pip download -q --no-deps --only-binary :all: -d "$ref" mpich==5.0.2 >&2 ||
      abi_die "pip download mpich==5.0.2 failed; set MPICH_ABI_DIR to an unpacked wheel's data folder"
    local whl
    whl=$(ls "$ref"/mpich-5.0.2-*.whl | head -1)
    (cd "$ref" && python3 -m zipfile -e "$whl" .) || abi_die "cannot unpack $whl"
  fi
  chmod +x "$data"/bin/* 2>/dev/null || true
  echo "$data"
}

abi_use_mpich() {
  ABI_IMPL=mpich
  local d
  d=$(abi_mpich_dir) || exit 2
  MPICC=${MPICC:-$d/bin/mpicc_abi}
  MPICXX=${MPICXX:-$d/bin/mpicxx_abi}
  MPIEXEC=${MPIEXEC:-$d/bin/mpiexec}
  MPICH_ABI_DIR=$d
  export MPICC MPICXX MPIEXEC ABI_IMPL MPICH_ABI_DIR
}

abi_run_env() {
  if [ -n "${ABI_LIBDIR:-}" ]; then
    echo "LD_LIBRARY_PATH=$ABI_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  else
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  fi
}

abi_describe() {
  echo "$ABI_SUITE: implementation ${ABI_IMPL:-custom}: MPICC=$MPICC MPICXX=$MPICXX MPIEXEC=$MPIEXEC${ABI_LIBDIR:+ ABI_LIBDIR=$ABI_LIBDIR}"
}
