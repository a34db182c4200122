#!/usr/bin/env bash
# The project's test command (README.md, second command; .ci/run calls it).
# Checks core/'s import graph first (scripts/import-graph.py: fails on a cycle between
# files beyond its allowlist), installs cargo-nextest if it is missing, builds every
# binary and example the multi-process tests start, then runs the doc tests and the
# whole suite with nextest.
#
# As root (CI), it also starts a PRIVATE real single-node Slurm and a 2-node Slurm in
# network namespaces (scripts/slurm/) for tests/slurm.rs: own slurm.conf (SLURM_CONF),
# state, log and run directories in temporary directories, free ports, own munged; the
# machine's /etc and any Slurm already running are left alone (Slurm is unpacked from
# the Debian packages, not installed, if missing). It sets RANKWIRE_REQUIRE_SLURM=1 so
# that those tests fail rather than skip if a cluster is missing, stops what it started
# (by recorded PIDs) when it exits, even on failure, and fails if /etc/slurm, /etc/munge
# or the machine's Slurm/munge daemons changed (scripts/slurm/system-state.sh).
# RANKWIRE_SLURM=0 skips all of that (the Slurm tests then skip with a message).
set -euo pipefail
cd "$(dirname "$0")/.."
# Layering of core/ (issue 16): no file-level import cycle beyond the allowlist. It
# prints every cycle with the line of each edge, so a failure says what to move.
python3 scripts/import-graph.py --self-test
python3 scripts/import-graph.py
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "test.sh: installing cargo-nextest"
  cargo install cargo-nextest --locked
fi
if [ "${RANKWIRE_SLURM:-1}" != 0 ] && [ "$(id -u)" = 0 ]; then
  export RANKWIRE_REQUIRE_SLURM=1
  # shellcheck source=slurm/ci-slurm.sh
  . scripts/slurm/ci-slurm.sh
  trap 'ci_slurm_stop || exit $?' EXIT
  ci_slurm_start || echo "test.sh: Slurm could not be started; the Slurm tests will fail" >&2
fi
# --lib: also the MPI standard-ABI library (abi/, a cdylib no binary depends on),
# which tests/abi.rs installs under target/abi-prefix and links C programs against.
cargo build --workspace --lib --bins --examples
# Doc tests first (nextest does not run them), so nextest's summary closes the output.
cargo test --workspace --doc
cargo nextest run --workspace --profile ci "$@"
