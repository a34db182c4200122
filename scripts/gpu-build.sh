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
mkdir -p .device-bin
for b in "$CARGO_TARGET_DIR/release/rw-gpuapp" "$CARGO_TARGET_DIR/release/rw-gpucoll" \
         "$CARGO_TARGET_DIR/release/rankwire-bench" "$CARGO_TARGET_DIR/release/rwrun" \
         "$CARGO_TARGET_DIR/release/examples/gpu_selftest"; do
  cp "$b" .device-bin/
  strip ".device-bin/$(basename "$b")"
done
ls -la .device-bin
