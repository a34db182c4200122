#!/usr/bin/env bash
# Fuzz the wire frame decoder and the bootstrap protocol parser (fuzz/, cargo-fuzz):
# each target runs FUZZ_SECONDS (default 60; by hand e.g. FUZZ_SECONDS=3600). Needs a
# nightly toolchain and cargo-fuzz, which it installs through rustup and crates.io when
# missing. Where either cannot be installed (or the nightly build fails), it runs the
# same checks as bounded property tests on stable and says so. A crash fails the script;
# the input that crashed is in fuzz/artifacts/<target>/ (add it as a regression test).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${FUZZ_SECONDS:-60}
stable_instead() {
  echo "fuzz: $1; running the same checks as bounded property tests on stable instead"
  cargo test -p rankwire --lib fuzz_entry
  exit 0
}
if ! cargo +nightly --version >/dev/null 2>&1; then
  command -v rustup >/dev/null 2>&1 || stable_instead "no nightly toolchain and no rustup"
  echo "fuzz: installing the nightly toolchain"
  rustup toolchain install nightly --profile minimal >/dev/null 2>&1 ||
    stable_instead "the nightly toolchain could not be installed"
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz"
  cargo install cargo-fuzz --locked >/dev/null 2>&1 || stable_instead "cargo-fuzz could not be installed"
fi
cd fuzz
cargo +nightly fuzz build >/dev/null 2>&1 || stable_instead "the fuzz targets did not build on nightly"
for t in frame_decoder bootstrap_parser; do
  echo "fuzz: $t for $secs s"
  log="target/fuzz-$t.log"
  mkdir -p target
  # -rss_limit_mb: an input that makes a parser allocate without bound is a crash.
  set +e
  cargo +nightly fuzz run "$t" -- -max_total_time="$secs" -rss_limit_mb=1024 -max_len=4096 \
    -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb)' "$log" || true
  if [ "$rc" -ne 0 ]; then
    tail -40 "$log"
    echo "fuzz: $t failed (exit $rc); a crashing input is in fuzz/artifacts/$t/"
    exit 1
  fi
done
