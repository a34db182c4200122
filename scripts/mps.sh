# CUDA MPS (Multi-Process Service) control daemon start and stop, sourced by
# scripts/gpu-run.sh and scripts/gpu-compare.sh (not run on its own). Without MPS, ranks
# sharing one GPU time-slice it: each device operation after one of another process
# waits ~150 µs (one H200); with MPS they run concurrently.
#
#   mps_start [PIPE_DIR [LOG_DIR]]  start `nvidia-cuda-mps-control -d` (needs root or the
#       GPU's owner) with CUDA_MPS_PIPE_DIRECTORY / CUDA_MPS_LOG_DIRECTORY exported for
#       the clients (default /tmp/mps-pipe, /tmp/mps-log). Returns 0 when a daemon runs
#       (started here, or already running on that pipe directory: then reused and not
#       stopped); else 1 with the reason in MPS_WHY.
#   mps_stop   stop the daemon mps_start started (`echo quit | nvidia-cuda-mps-control`)
#       and unset the variables; does nothing otherwise, so it is safe in an EXIT trap.
#   mps_running [PIPE_DIR]  whether a daemon listens on PIPE_DIR (default
#       $CUDA_MPS_PIPE_DIRECTORY, else /tmp/nvidia-mps, the CUDA default).
MPS_STARTED=0
MPS_WHY=
mps_ctl() {
  command -v nvidia-cuda-mps-control 2>/dev/null ||
    { [ -x /usr/local/nvidia/bin/nvidia-cuda-mps-control ] && echo /usr/local/nvidia/bin/nvidia-cuda-mps-control; }
}
mps_running() { # a control pipe there, and a daemon answering on it (not a stale pipe)
  local dir=${1:-${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}} ctl
  ctl=$(mps_ctl)
  [ -n "$ctl" ] && { [ -p "$dir/control" ] || [ -S "$dir/control" ]; } &&
    echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$dir timeout 5 "$ctl" >/dev/null 2>&1
}
mps_start() {
  local pipe=${1:-/tmp/mps-pipe} log=${2:-/tmp/mps-log} ctl
  ctl=$(mps_ctl)
  if [ -z "$ctl" ]; then MPS_WHY="nvidia-cuda-mps-control not found"; return 1; fi
  export CUDA_MPS_PIPE_DIRECTORY=$pipe CUDA_MPS_LOG_DIRECTORY=$log
  if mps_running "$pipe"; then MPS_WHY="reusing the daemon already on $pipe"; return 0; fi
  if [ "$(id -u)" != 0 ]; then
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    MPS_WHY="not root (start it as root or the GPU's owner: nvidia-cuda-mps-control -d)"
    return 1
  fi
  mkdir -p "$pipe" "$log"
  if ! "$ctl" -d; then
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    MPS_WHY="nvidia-cuda-mps-control -d failed"
    return 1
  fi
  MPS_STARTED=1
  MPS_WHY="started: nvidia-cuda-mps-control -d, CUDA_MPS_PIPE_DIRECTORY=$pipe"
}
mps_stop() {
  if [ "$MPS_STARTED" = 1 ]; then
    echo quit | "$(mps_ctl)"
    MPS_STARTED=0
  fi
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
