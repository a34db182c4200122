#!/usr/bin/env bash
# Build the GPU-enabled binaries here (no CUDA needed to build: cudarc loads libcuda at
# run time) and copy them, stripped, into .device-bin/ (git-ignored) for the GPU machine.
# Then, on the GPU machine: scripts/gpu-run.sh OUTDIR
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/gpu}
cargo build --release -p rankwire-tests --bins
cargo build --release -p rankwire-mpirun --bins
cargo build --release -p rankwire-bench
cargo build --release -p rankwire-gpu --features cuda --examples
# The MPI standard-ABI library (issue 20): .device-bin/lib/libmpi_abi.so.1, linked by
# abi/bin/mpicc with RANKWIRE_ABI_LIBDIR=.device-bin/lib on the GPU machine.
cargo build --release -p rankwire-abi
mkdir -p .device-bin
for b in "$CARGO_TARGET_DIR/release/rw-gpuapp" "$CARGO_TARGET_DIR/release/rw-gpucoll" \
         "$CARGO_TARGET_DIR/release/rankwire-bench" "$CARGO_TARGET_DIR/release/rwrun" \
         "$CARGO_TARGET_DIR/release/examples/gpu_selftest"; do
  cp "$b" .device-bin/
  strip ".device-bin/$(basename "$b")"
done
mkdir -p .device-bin/lib
cp "$CARGO_TARGET_DIR/release/libmpi_abi.so" .device-bin/lib/libmpi_abi.so.1
strip .device-bin/lib/libmpi_abi.so.1
ln -sfn libmpi_abi.so.1 .device-bin/lib/libmpi_abi.so
# OSU micro-benchmarks source for the CUDA build on the GPU machine (third-party test
# input: copied into the git-ignored folder only, never committed).
OSU_TARBALL=${OSU_TARBALL:-../shared/vendor/osu-micro-benchmarks-7.2.tar.gz}
if [ -f "$OSU_TARBALL" ]; then cp "$OSU_TARBALL" .device-bin/; else echo "gpu-build.sh: $OSU_TARBALL absent: no OSU on the GPU machine"; fi
# mpi4py 4.1.2's sdist for scripts/gpu-mpi4py.sh (the GPU machine has no network).
M4=target/mpi4py/mpi4py-4.1.2.tar.gz
[ -f "$M4" ] || python3 -m pip download -q --no-deps --no-binary mpi4py -d target/mpi4py mpi4py==4.1.2 || true
if [ -f "$M4" ]; then cp "$M4" .device-bin/; else echo "gpu-build.sh: no mpi4py sdist: no mpi4py on the GPU machine"; fi
# MPICH 5.0.2's standard-ABI build (PyPI wheel; not CUDA-aware) for the reference pass
# of scripts/gpu-abi.sh: what the same OSU binaries give on another MPI's library.
# Its lib/ (without the MPICH-ABI libmpi.so.12) and bin/, packed (about 10 MB).
if data=$(ABI_SUITE=gpu-build.sh bash -c '. scripts/abi-env.sh; abi_mpich_dir' 2>/dev/null); then
  tar czf .device-bin/mpich-abi.tgz -C "$data" --exclude 'libmpi.so*' --exclude include lib bin
else
  echo "gpu-build.sh: MPICH's ABI wheel cannot be had: no MPICH reference on the GPU machine"
fi
ls -la .device-bin .device-bin/lib
