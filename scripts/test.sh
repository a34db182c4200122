#!/usr/bin/env bash
# The project's test command (README.md, second command; .ci/run calls it).
# Installs cargo-nextest if it is missing, builds every binary and example the
# multi-process tests start, then runs the doc tests and the whole suite with nextest.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "test.sh: installing cargo-nextest"
  cargo install cargo-nextest --locked
fi
cargo build --workspace --bins --examples
# Doc tests first (nextest does not run them), so nextest's summary closes the output.
cargo test --workspace --doc
cargo nextest run --workspace --profile ci "$@"
