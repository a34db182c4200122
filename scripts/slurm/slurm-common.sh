# slurm-common.sh — shared helpers for start-local-slurm.sh / start-netns-slurm.sh.
# Sourced, not run. Expects DIR, PIDS, LOGS and TAG to be set by the caller.

log() { printf '[%s] %s\n' "$TAG" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# alive PIDFILE: the recorded process still exists.
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

require_root() { [ "$(id -u)" = 0 ] || die "must run as root (writes /etc/slurm, starts daemons)"; }

# Install munge + Slurm 22.05 (Debian 12) unless present. rankwire's tests use only
# --mpi=pmi2 (and --mpi=none), so PMIx is not installed: mpi_pmix*.so dlopen()s the
# unversioned "libpmix.so", which only libpmix-dev ships, and without it an
# `srun --mpi=pmix` step hangs. Set RW_SLURM_PMIX=1 to install libpmix2 + libpmix-dev too.
ensure_packages() {
  local need=() p pkgs=(munge slurmctld slurmd slurm-client)
  [ "${RW_SLURM_PMIX:-0}" = 1 ] && pkgs+=(libpmix2 libpmix-dev)
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
  done
  [ ${#need[@]} -eq 0 ] && return 0
  [ "${RW_SLURM_NO_INSTALL:-0}" = 1 ] && die "missing packages: ${need[*]}"
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  timeout 600 apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "${need[@]}" >/dev/null ||
    { timeout 300 apt-get -o DPkg::Lock::Timeout=300 update >/dev/null &&
      timeout 600 apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "${need[@]}" >/dev/null; } ||
    die "apt-get install ${need[*]} failed"
}

munge_ok() { timeout 5 munge -n 2>/dev/null | timeout 5 unmunge >/dev/null 2>&1; }

# Start munged as user munge unless one already answers (then leave it alone).
ensure_munge() {
  if [ ! -s /etc/munge/munge.key ]; then
    log "creating /etc/munge/munge.key"
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
  fi
  chown munge:munge /etc/munge /etc/munge/munge.key
  chmod 0700 /etc/munge
  chmod 0400 /etc/munge/munge.key
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
  if munge_ok; then
    log "munged already answering; leaving it alone"
    return 0
  fi
  rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
  # setsid and setpriv both exec (no fork), so $! is munged itself; -F = foreground.
  setsid setpriv --reuid=munge --regid=munge --init-groups \
    /usr/sbin/munged -F --force >"$LOGS/munged.out" 2>&1 </dev/null &
  echo $! >"$PIDS/munged.pid"
  local _
  for _ in $(seq 50); do munge_ok && return 0; sleep 0.1; done
  die "munged did not come up; see $LOGS/munged.out"
}

# common_conf CLUSTER CTLD_HOST CTLD_ADDR CTLD_PORT SLURMD_PORT MPI_PORTS
# Prints the slurm.conf lines shared by both layouts (no NodeName/PartitionName).
common_conf() {
  cat <<EOF
ClusterName=$1
SlurmctldHost=$2($3)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=$4
SlurmdPort=$5
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/slurmd-%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups here: track processes by walking /proc, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# Trust the configured CPU count even if the machine has fewer cores (oversubscription).
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
# Ports srun --resv-ports / the pmi2 and pmix plugins hand out (SLURM_STEP_RESV_PORTS).
MpiParams=ports=$6
MailProg=/bin/true
ReturnToService=2
SlurmctldTimeout=60
SlurmdTimeout=60
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
EOF
}

# install_conf TMPFILE DEST: install if different; sets conf_changed=0/1.
install_conf() {
  conf_changed=0
  if ! cmp -s "$1" "$2"; then
    conf_changed=1
    if [ -f "$2" ] && [ ! -f "$2.pre-rankwire" ]; then cp "$2" "$2.pre-rankwire"; fi
    install -D -m 0644 "$1" "$2"
  fi
  rm -f "$1"
}

port_in_use() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }
