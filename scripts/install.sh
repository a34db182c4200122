#!/usr/bin/env bash
# Installs rankwire's MPI standard ABI under a prefix:
#   DIR/lib/libmpi_abi.so.1 (+ the libmpi_abi.so link for -lmpi_abi)
#   DIR/include/mpi.h
#   DIR/bin/mpicc, mpicxx, mpiexec (the wrappers of abi/bin) and rwrun
# Programs built with DIR/bin/mpicc find the library through their rpath; run them with
# DIR/bin/mpiexec -n N ./prog (or rwrun). Programs built against another implementation's
# standard ABI run on it with LD_LIBRARY_PATH=DIR/lib.
#
# Usage: scripts/install.sh --prefix DIR [--debug] [--no-build]
#   --debug     build (the workspace debug build scripts/test.sh makes) and install
#               target/debug (fast; for tests) instead of release
#   --no-build  install what is already built
# CARGO_TARGET_DIR is honoured; extra cargo flags can be given in CARGO_FLAGS
# (e.g. CARGO_FLAGS="--no-default-features" for a build without CUDA support).
set -euo pipefail
caller_dir=$(pwd)
cd "$(dirname "$0")/.."

prefix=""
profile=release
build=1
while [ $# -gt 0 ]; do
    case $1 in
        --prefix) [ $# -ge 2 ] || { echo "install.sh: --prefix needs a directory" >&2; exit 2; }
                  prefix=$2; shift 2 ;;
        --prefix=*) prefix=${1#--prefix=}; shift ;;
        --debug) profile=debug; shift ;;
        --no-build) build=0; shift ;;
        -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown argument $1; usage: scripts/install.sh --prefix DIR [--debug] [--no-build]" >&2
           exit 2 ;;
    esac
done
if [ -z "$prefix" ]; then
    echo "install.sh: no --prefix; usage: scripts/install.sh --prefix DIR [--debug] [--no-build]" >&2
    exit 2
fi
# A relative prefix is relative to where the script was called from.
case $prefix in /*) ;; *) prefix=$caller_dir/$prefix ;; esac

target=${CARGO_TARGET_DIR:-target}
if [ "$build" = 1 ]; then
    if [ "$profile" = release ]; then
        # shellcheck disable=SC2086 # CARGO_FLAGS is a list of words
        cargo build --release ${CARGO_FLAGS:-} -p rankwire-abi -p rankwire-mpirun
    else
        # The debug build is the one scripts/test.sh makes (and nextest's test builds
        # share): the same packages and targets resolve the same features, so this is
        # up to date after test.sh's build. Building only -p rankwire-abi here resolved
        # other features (no examples' dev-dependencies) and recompiled the workspace
        # inside the first ABI test, past its 300 s limit on a fresh 2-core clone.
        # shellcheck disable=SC2086
        cargo build ${CARGO_FLAGS:-} --workspace --lib --bins --examples
    fi
fi
lib=$target/$profile/libmpi_abi.so
rwrun=$target/$profile/rwrun
for f in "$lib" "$rwrun"; do
    if [ ! -f "$f" ]; then
        echo "install.sh: $f is missing; fix: run without --no-build (or cargo build -p rankwire-abi -p rankwire-mpirun)" >&2
        exit 1
    fi
done

mkdir -p "$prefix/lib" "$prefix/include" "$prefix/bin"
prefix=$(cd "$prefix" && pwd)
installed=()
# Each file is copied next to its destination and renamed over it (atomic), so that
# programs running from or linking against the prefix meanwhile never see a partial
# file (tests/abi.rs refreshes the prefix while other tests use it).
put() { # mode, source, destination
    install -m "$1" "$2" "$3.tmp.$$"
    mv -f "$3.tmp.$$" "$3"
    installed+=("$3")
}
put 0755 "$lib" "$prefix/lib/libmpi_abi.so.1"
ln -sfn libmpi_abi.so.1 "$prefix/lib/libmpi_abi.so.tmp.$$"
mv -fT "$prefix/lib/libmpi_abi.so.tmp.$$" "$prefix/lib/libmpi_abi.so"
installed+=("$prefix/lib/libmpi_abi.so -> libmpi_abi.so.1")
put 0644 abi/include/mpi.h "$prefix/include/mpi.h"
for w in mpicc mpicxx mpiexec; do
    put 0755 "abi/bin/$w" "$prefix/bin/$w"
done
put 0755 "$rwrun" "$prefix/bin/rwrun"

echo "install.sh: installed rankwire's MPI standard ABI ($profile build) under $prefix:"
for f in "${installed[@]}"; do echo "  $f"; done
echo "Build: $prefix/bin/mpicc prog.c -o prog   Run: $prefix/bin/mpiexec -n 2 ./prog"
