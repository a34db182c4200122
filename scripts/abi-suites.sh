#!/usr/bin/env bash
# CI stage (issue 20): the outside test suites of the standard ABI against rankwire's own
# libmpi_abi.so.1, built and installed once (`scripts/install.sh --debug --prefix
# target/abi-prefix`, through scripts/abi-env.sh), launched by rwrun:
#
#   scripts/osu.sh, scripts/mpi4py.sh, scripts/rsmpi.sh   by default;
#                       RANKWIRE_CI_ABI_SUITES="osu mpi4py" (any subset) picks some;
#                       RANKWIRE_CI_ABI_REF=1 runs mpi4py with --ref as well (the same
#                       build on MPICH's library, and the list of tests that pass there
#                       and not on ours)
#
# Each suite runs even when an earlier one failed; the stage fails if any failed. Every
# suite's status and wall time go to target/abi-suites.txt (and stdout). .ci/run calls this
# after scripts/test.sh when RANKWIRE_CI_ABI=1. The suites' own variables (OSU_NP,
# MPI4PY_NP, ..., see each script's header) pass through.
set -euo pipefail
cd "$(dirname "$0")/.."
ABI_SUITE=abi-suites.sh
# shellcheck source=abi-env.sh
. scripts/abi-env.sh
# mpi4py at 1, 2, 3 and 4 ranks, as issue 20 asks (each run about 2-4 minutes on 2 cores).
export MPI4PY_NP=${MPI4PY_NP:-1 2 3 4}
start=$SECONDS
abi_use_ours
abi_describe

read -r -a suites <<<"${RANKWIRE_CI_ABI_SUITES:-osu mpi4py rsmpi}"
[ "${suites[*]}" = all ] && suites=(osu mpi4py rsmpi)
for s in "${suites[@]}"; do
  case "$s" in osu | mpi4py | rsmpi) ;; *) abi_die "RANKWIRE_CI_ABI_SUITES: unknown suite '$s' (osu, mpi4py, rsmpi)" ;; esac
done
lines=()
failed=0
for s in "${suites[@]}"; do
  t0=$SECONDS
  echo "=== abi-suites: scripts/$s.sh"
  args=()
  if [ "$s" = mpi4py ] && [ "${RANKWIRE_CI_ABI_REF:-0}" != 0 ]; then args=(--ref); fi
  rc=0
  "scripts/$s.sh" "${args[@]}" || rc=$?
  status=pass
  [ "$rc" = 0 ] || { status="FAIL (exit $rc)"; failed=1; }
  lines+=("$(printf '%-8s %-16s %5ss  target/%s/summary.txt' "$s" "$status" $((SECONDS - t0)) "$s")")
done
{
  echo "# outside ABI suites on $ABI_IMPL, $(date -u +%Y-%m-%dT%H:%MZ)"
  printf '%s\n' "${lines[@]}"
  echo "# total $((SECONDS - start))s (with the library build)"
} | tee target/abi-suites.txt
exit "$failed"
