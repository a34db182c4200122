#!/usr/bin/env bash
# system-state.sh — print what the test clusters must never change on this machine: a
# checksum of every file under /etc/slurm and /etc/munge (names, modes, owners and
# contents; "absent" if missing) and the PIDs and command lines of running slurmctld,
# slurmd, slurmstepd and munged processes. scripts/test.sh prints this before starting its
# private clusters and after stopping them, and fails if the two differ
# (`system-state.sh --compare BEFORE_FILE` does the comparison).
set -uo pipefail

snapshot() {
  local d
  for d in /etc/slurm /etc/munge; do
    if [ -e "$d" ]; then
      printf '%s: %s\n' "$d" "$(
        cd "$d" && find . -printf '%p %m %u:%g %s\n' 2>/dev/null | LC_ALL=C sort | sha256sum | cut -c1-16
      )/$(cd "$d" && find . -type f -print0 2>/dev/null | LC_ALL=C sort -z | xargs -0r sha256sum | sha256sum | cut -c1-16)"
    else
      printf '%s: absent\n' "$d"
    fi
  done
  # Daemons by executable name (the system's /usr/sbin/... or Debian's *-wlm names).
  local p comm
  for p in /proc/[0-9]*; do
    comm=$(cat "$p/comm" 2>/dev/null) || continue
    case "$comm" in
      slurmctld*|slurmd*|slurmstepd*|munged)
        printf 'process %s %s: %s\n' "${p#/proc/}" "$comm" "$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)" ;;
    esac
  done | LC_ALL=C sort
}

if [ "${1:-}" = --compare ]; then
  before=$2
  after=$(snapshot)
  if [ "$after" != "$(cat "$before")" ]; then
    echo "system-state: the Slurm tests changed this machine's Slurm/munge (configuration or daemons):" >&2
    diff <(cat "$before") <(echo "$after") >&2
    exit 1
  fi
  echo "system-state: /etc/slurm, /etc/munge and the running Slurm/munge daemons are as before the tests" >&2
  exit 0
fi
snapshot
