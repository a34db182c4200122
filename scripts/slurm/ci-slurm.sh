# ci-slurm.sh — sourced by scripts/test.sh: start the test clusters (single node and,
# if possible, 2 nodes in network namespaces) and stop afterwards only what this run
# started. Clusters already running before (a developer's) are left alone.

_ci_slurm_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_ci_slurm_started=()

# _ci_slurm_up DIR PIDFILE...: every recorded daemon of that cluster is alive.
_ci_slurm_up() {
  local dir=$1 f
  shift
  for f in "$@"; do
    [ -s "$dir/pids/$f" ] && kill -0 "$(cat "$dir/pids/$f")" 2>/dev/null || return 1
  done
}

ci_slurm_start() {
  local t0=$SECONDS rc=0
  local local_dir=${RW_SLURM_DIR:-/tmp/rankwire-slurm}
  local netns_dir=/tmp/rankwire-slurm-netns
  _ci_slurm_up "$local_dir" slurmctld.pid slurmd.pid || _ci_slurm_started+=("$local_dir")
  # A node name with a dash and no trailing digit (B018: names of any form work).
  RW_SLURM_DIR=$local_dir RW_SLURM_NODE=${RW_SLURM_NODE:-rw-node} \
    "$_ci_slurm_here/start-local-slurm.sh" || rc=1
  _ci_slurm_up "$netns_dir" slurmctld.pid slurmd-nn1.pid slurmd-nn2.pid || _ci_slurm_started+=("$netns_dir")
  RW_SLURM_DIR=$netns_dir "$_ci_slurm_here/start-netns-slurm.sh" || rc=1
  echo "test.sh: Slurm clusters ready in $((SECONDS - t0)) s (rc=$rc)" >&2
  return $rc
}

ci_slurm_stop() {
  local d
  # Stop in reverse order; munged (shared) goes with the last cluster that started it.
  for ((i = ${#_ci_slurm_started[@]} - 1; i >= 0; i--)); do
    d=${_ci_slurm_started[i]}
    RW_SLURM_DIR=$d "$_ci_slurm_here/stop-local-slurm.sh" || true
  done
}
