#!/usr/bin/env bash
# mpi4py 4.1.2's test suite as an outside test suite of the standard ABI (issue 20).
#
#   scripts/mpi4py.sh          build mpi4py against the standard ABI with $MPICC (default
#                              rankwire's mpicc), run its tests under $MPIEXEC (rwrun)
#   scripts/mpi4py.sh --ref    also run the same build on MPICH 5.0.2's libmpi_abi.so.1
#                              (PyPI `mpich`, launched by MPICH's mpiexec) and list every
#                              test that passes there and not with the first run
#
# Steps: `pip download --no-deps --no-binary mpi4py mpi4py==4.1.2` (the sdist: it holds
# test/) into target/mpi4py/; a venv target/mpi4py/venv with numpy (MPI4PY_NUMPY=0: none);
# `MPI4PY_BUILD_MPIABI=1 MPICC=$MPICC pip install` of the sdist (CFLAGS
# ${MPI4PY_CFLAGS:--O1 -g0}; rebuilt only when MPICC or the flags change); then
# `$MPIEXEC -n K python test/main.py -v $MPI4PY_TEST_ARGS` for K in ${MPI4PY_NP:-1 2 3 4},
# leaving out what scripts/mpi4py-scope.txt lists (one-sided, I/O, dynamic processes:
# outside issue 20; MPI4PY_SCOPE= runs everything, MPI4PY_SCOPE=FILE another list),
# each bounded by `timeout ${MPI4PY_TIMEOUT:-900}` seconds, every
# rank's output in its own file (target/mpi4py/run-<impl>/nK/rank<R>.log; the rank comes
# from RANKWIRE_RANK, PMI_RANK or OMPI_COMM_WORLD_RANK). Per-test outcomes (unittest's
# `... ok/FAIL/ERROR/skipped`, worst over ranks; scripts/mpi4py-outcomes.py) go to
# outcomes-nK.tsv, the counts per K to target/mpi4py/summary.txt; with --ref, the tests
# ok on MPICH and not ok on the first run go to target/mpi4py/regressions-nK.txt.
#
# The build and the run library are separate: the extension is linked to libmpi_abi.so.1
# with the wrapper's run path; ABI_LIBDIR (scripts/abi-env.sh) or, for --ref, MPICH's lib/
# is put first on LD_LIBRARY_PATH, and each run records MPI.Get_library_version() to show
# which library it really used. Exits 1 when a run fails (a test failed or errored, or the
# run timed out) unless MPI4PY_ALLOW_FAIL=1.
set -euo pipefail
cd "$(dirname "$0")/.."
ABI_SUITE=mpi4py.sh
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

start=$SECONDS
out=$ABI_ROOT/target/mpi4py
mkdir -p "$out"
version=4.1.2
abi_use_ours
impl=$ABI_IMPL
abi_describe

# --- sdist, venv, build ------------------------------------------------------------------
sdist=$out/mpi4py-$version.tar.gz
if [ ! -f "$sdist" ]; then
  echo "mpi4py.sh: pip download mpi4py==$version (sdist)"
  python3 -m pip download -q --no-deps --no-binary mpi4py -d "$out" "mpi4py==$version" ||
    abi_die "pip download mpi4py==$version failed (PyPI unreachable?)"
fi
src=$out/mpi4py-$version
[ -d "$src/test" ] || tar xzf "$sdist" -C "$out"
venv=$out/venv
py=$venv/bin/python
if [ ! -x "$py" ]; then
  python3 -m venv "$venv" || abi_die "python3 -m venv failed (apt-get install python3-venv)"
  "$py" -m pip install -q --upgrade pip setuptools >/dev/null 2>&1 || true
fi
if [ "${MPI4PY_NUMPY:-1}" = 1 ] && ! "$py" -c 'import numpy' 2>/dev/null; then
  "$py" -m pip install -q numpy || echo "mpi4py.sh: numpy not installed; its tests will skip" >&2
fi
# The extension's speed does not matter here; -O1 without debug info halves its build.
cflags=${MPI4PY_CFLAGS:--O1 -g0}
# MPI4PY_BUILD_CONFIGURE=1 (default): mpi4py probes at build time which MPI functions the
# library has and leaves the others out (they raise NotImplementedError). Without it the
# standard-ABI build links every function of the standard, and importing it fails on a
# library that lacks one (rankwire's lacks one-sided, I/O, dynamic processes, sessions).
configure=${MPI4PY_BUILD_CONFIGURE:-1}
# With MPI4PY_BUILD_CONFIGURE=1 the build depends on which functions the library
# exports: a library that gained one rebuilds mpi4py (the key holds their checksum).
abi_lib=$(dirname "$MPICC")/../lib/libmpi_abi.so.1
syms=none
if [ "$configure" = 1 ] && [ -f "$abi_lib" ] && command -v nm >/dev/null; then
  syms=$(nm -D --defined-only "$abi_lib" | awk '$3 ~ /^MPIX?_/ {print $3}' | sort | cksum | cut -d' ' -f1)
fi
key="$version $MPICC $(cksum <"$MPICC" | cut -d' ' -f1) $cflags configure=$configure symbols=$syms"
if [ "$(cat "$venv/.mpi4py-build" 2>/dev/null)" != "$key" ]; then
  echo "mpi4py.sh: building mpi4py $version with MPI4PY_BUILD_MPIABI=1 MPICC=$MPICC (log $out/build.log)"
  b0=$SECONDS
  # setuptools would reuse objects of an earlier build (another mpi.h, other flags).
  rm -rf "$src/build"
  (cd "$src" && MPI4PY_BUILD_MPIABI=1 MPI4PY_BUILD_CONFIGURE="$configure" MPICC="$MPICC" CC="$MPICC" CFLAGS="$cflags" \
    "$py" -m pip install -v --no-deps --force-reinstall . >"$out/build.log" 2>&1) ||
    abi_die "building mpi4py failed: see $out/build.log ($(grep -m3 -i 'error' "$out/build.log" | tr '\n' ' ' | cut -c1-300))"
  echo "$key" >"$venv/.mpi4py-build"
  echo "mpi4py.sh: built in $((SECONDS - b0))s"
fi
build_s=$((SECONDS - start))

# Rank wrapper: one output file per rank (interleaved ranks break unittest's lines).
wrap=$out/rank-output.sh
cat >"$wrap" <<'EOF'
#!/bin/sh
r=${RANKWIRE_RANK:-${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-0}}}
exec "$@" >"$MPI4PY_LOGDIR/rank$r.log" 2>&1
EOF
chmod +x "$wrap"

read -r -a nps <<<"${MPI4PY_NP:-1 2 3 4}"
read -r -a targs <<<"${MPI4PY_TEST_ARGS:-}"
# The parts of the suite outside issue 20's scope (scripts/mpi4py-scope.txt; MPI4PY_SCOPE=
# an empty value runs everything).
scope=${MPI4PY_SCOPE-scripts/mpi4py-scope.txt}
excluded=()
if [ -n "$scope" ]; then
  [ -f "$scope" ] || abi_die "MPI4PY_SCOPE=$scope does not exist"
  while read -r kind pat _; do
    case "$kind" in
      module) targs+=(-e "$pat") ;;
      test) targs+=(-x "$pat") ;;
      '' | '#'*) continue ;;
      *) abi_die "$scope: unknown kind '$kind' (module, test)" ;;
    esac
    excluded+=("$kind $pat")
  done <"$scope"
fi
tmo=${MPI4PY_TIMEOUT:-900}
failed=0
summary=()

# run LABEL MPIEXEC LIBDIR: the suite at every K; one summary line per K.
run_suite() {
  local label=$1 mpiexec=$2 libdir=$3 np rc t0 lib counts dir
  local ldp=${LD_LIBRARY_PATH:-}
  [ -n "$libdir" ] && ldp=$libdir${ldp:+:$ldp}
  lib=$(LD_LIBRARY_PATH=$ldp timeout 60 "$py" -c \
    'from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0].strip())' 2>&1 | tail -1) || true
  summary+=("# $label: MPIEXEC=$mpiexec${libdir:+ LD_LIBRARY_PATH=$libdir...}; library: $lib")
  for np in "${nps[@]}"; do
    dir=$out/run-$label/n$np
    rm -rf "$dir"
    mkdir -p "$dir"
    t0=$SECONDS
    rc=0
    MPI4PY_LOGDIR=$dir LD_LIBRARY_PATH=$ldp timeout -k 10 "$tmo" \
      "$mpiexec" -n "$np" "$wrap" "$py" "$src/test/main.py" -v "${targs[@]}" </dev/null >"$dir/launcher.log" 2>&1 || rc=$?
    counts=$(python3 scripts/mpi4py-outcomes.py parse "$dir" "$out/run-$label/outcomes-n$np.tsv")
    local how="exit $rc"
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then how="TIMEOUT after ${tmo}s"; fi
    summary+=("$(printf '%-10s np=%-2s %s; %s; %ss' "$label" "$np" "$counts" "$how" $((SECONDS - t0)))")
    echo "mpi4py.sh: ${summary[-1]}"
    if [ "$label" != ref ] && [ "$rc" != 0 ]; then failed=1; fi
  done
}

run_suite "$impl" "$MPIEXEC" "${ABI_LIBDIR:-}"
if [ "$ref" = 1 ]; then
  ours_label=$impl
  d=$(abi_mpich_dir) || exit 2
  run_suite ref "$d/bin/mpiexec" "$d/lib"
  for np in "${nps[@]}"; do
    python3 scripts/mpi4py-outcomes.py diff "$out/run-ref/outcomes-n$np.tsv" \
      "$out/run-$ours_label/outcomes-n$np.tsv" >"$out/regressions-n$np.txt"
    summary+=("# np=$np: $(wc -l <"$out/regressions-n$np.txt") test(s) ok on MPICH and not on $ours_label: $out/regressions-n$np.txt")
  done
fi
{
  echo "# mpi4py $version test suite (test/main.py -v ${targs[*]}), $(date -u +%Y-%m-%dT%H:%MZ); timeout ${tmo}s per run"
  echo "# built with MPICC=$MPICC (MPI4PY_BUILD_MPIABI=1)"
  [ ${#excluded[@]} = 0 ] || echo "# not run (outside the scope, $scope): ${excluded[*]}"
  printf '%s\n' "${summary[@]}"
  echo "# build ${build_s}s, total $((SECONDS - start))s"
} | tee "$out/summary.txt"

if [ "$failed" = 1 ] && [ "${MPI4PY_ALLOW_FAIL:-0}" != 1 ]; then
  echo "mpi4py.sh: a run on $impl failed (MPI4PY_ALLOW_FAIL=1 to report without failing)" >&2
  exit 1
fi
