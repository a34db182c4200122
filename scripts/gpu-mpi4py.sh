#!/usr/bin/env bash
# mpi4py with cupy device arrays on rankwire's standard-ABI library, on the GPU machine
# (issue 20). Run there from the repository root after scripts/gpu-build.sh here
# (it copies the mpi4py 4.1.2 sdist into .device-bin/, carried):
#   scripts/gpu-mpi4py.sh OUTDIR [NP...]
# Builds mpi4py from the sdist with abi/bin/mpicc (MPI4PY_BUILD_MPIABI=1,
# MPI4PY_BUILD_CONFIGURE=1) into a private directory (the machine's own mpi4py, built
# for its Open MPI, is left alone; no network is needed: --no-build-isolation with the
# machine's setuptools), then runs abi/tests/gpu/mpi4py_cupy.py under rwrun at each NP
# (default 2) in the environment as given (start MPS first to measure with it).
# Logs and summary.txt in OUTDIR.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-mpi4py.sh OUTDIR [NP...]}
shift
nps=("${@:-2}")
mkdir -p "$out"
root=$(pwd)
B=$root/.device-bin
export RANKWIRE_ABI_LIBDIR=$B/lib
sum=$out/summary.txt
note() { echo "$*" | tee -a "$sum"; }
sdist=$(ls "$B"/mpi4py-*.tar.gz 2>/dev/null | head -1)
[ -n "$sdist" ] || { note "mpi4py: no sdist in .device-bin (scripts/gpu-build.sh copies it)"; exit 2; }
python3 -c 'import cupy, setuptools' 2>"$out/imports.log" || { note "mpi4py: python3 lacks cupy or setuptools: $(tail -1 "$out/imports.log")"; exit 2; }
work=/tmp/rw-mpi4py
rm -rf "$work" && mkdir -p "$work" && tar xzf "$sdist" -C "$work"
src=$(ls -d "$work"/mpi4py-*/ | head -1)
t0=$SECONDS
(cd "$src" && MPI4PY_BUILD_MPIABI=1 MPI4PY_BUILD_CONFIGURE=1 MPICC="$root/abi/bin/mpicc" CC="$root/abi/bin/mpicc" \
  CFLAGS="-O1 -g0" python3 -m pip install -q --no-build-isolation --no-deps --target "$work/site" . ) >"$out/build.log" 2>&1
rc=$?
note "mpi4py build: rc=$rc ($((SECONDS - t0)) s)"
[ "$rc" = 0 ] || exit 1
for np in "${nps[@]}"; do
  t0=$SECONDS
  PYTHONPATH=$work/site timeout 300 "$B/rwrun" -n "$np" python3 abi/tests/gpu/mpi4py_cupy.py >"$out/mpi4py_cupy_$np.log" 2>&1
  note "mpi4py_cupy np=$np: rc=$? ($((SECONDS - t0)) s) $(grep -h -E '^mpi4py_cupy:|^# ' "$out/mpi4py_cupy_$np.log" | tr '\n' ' ')"
  grep -h '^allreduce_f32' "$out/mpi4py_cupy_$np.log" | sed "s/^/  np=$np /" | tee -a "$sum"
done
