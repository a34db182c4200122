# ci-slurm.sh — sourced by scripts/test.sh: start PRIVATE test clusters (single node and,
# if possible, 2 nodes in network namespaces) in fresh temporary directories, point the
# tests at them, and stop them (by recorded PIDs) when the run ends, even on failure.
#
# Private (see slurm-common.sh): own slurm.conf through SLURM_CONF, own state, spool, log
# and run directories, free ports, own munged with its own key and socket. A Slurm or
# munged already running on the machine, and /etc, are never touched: system-state.sh
# snapshots /etc/slurm, /etc/munge and the daemons' PIDs before the start, and
# ci_slurm_stop fails the run if anything differs after the stop.

_ci_slurm_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_ci_slurm_dirs=()
_ci_slurm_state=

ci_slurm_start() {
  local t0=$SECONDS rc=0 local_dir netns_dir
  _ci_slurm_state=$(mktemp /tmp/rankwire-system-state.XXXXXX)
  "$_ci_slurm_here/system-state.sh" >"$_ci_slurm_state"
  local_dir=$(mktemp -d /tmp/rankwire-slurm.XXXXXX)
  netns_dir=$(mktemp -d /tmp/rankwire-slurm-netns.XXXXXX)
  chmod 0755 "$local_dir" "$netns_dir"
  _ci_slurm_dirs=("$local_dir" "$netns_dir")
  # A node name with a dash and no trailing digit (B018: names of any form work).
  RW_SLURM_DIR=$local_dir RW_SLURM_NODE=${RW_SLURM_NODE:-rw-node} \
    "$_ci_slurm_here/start-local-slurm.sh" || rc=1
  RW_SLURM_DIR=$netns_dir "$_ci_slurm_here/start-netns-slurm.sh" || rc=1
  # The tests reach the clusters only through these (tests/support: rankwire_tests::slurm).
  if [ -f "$local_dir/env" ]; then
    # shellcheck disable=SC1091
    . "$local_dir/env" # SLURM_CONF, and PATH when Slurm was unpacked privately
  fi
  export RANKWIRE_SLURM_CONF=$local_dir/slurm.conf
  export RANKWIRE_SLURM_NETNS_CONF=$netns_dir/slurm.conf
  export SLURM_CONF=$RANKWIRE_SLURM_CONF
  echo "test.sh: private Slurm clusters ready in $((SECONDS - t0)) s (rc=$rc): $local_dir, $netns_dir" >&2
  return $rc
}

# Stop both clusters, remove their directories (logs kept when the run failed), and fail
# if the machine's own Slurm/munge configuration or daemons changed.
ci_slurm_stop() {
  local status=$? i d
  for ((i = ${#_ci_slurm_dirs[@]} - 1; i >= 0; i--)); do
    d=${_ci_slurm_dirs[i]}
    RW_SLURM_DIR=$d "$_ci_slurm_here/stop-local-slurm.sh" || true
    if [ "$status" = 0 ]; then rm -rf "$d"; else echo "test.sh: Slurm logs kept in $d/log" >&2; fi
  done
  if [ -n "$_ci_slurm_state" ]; then
    "$_ci_slurm_here/system-state.sh" --compare "$_ci_slurm_state" || status=1
    rm -f "$_ci_slurm_state"
  fi
  return "$status"
}
