# slurm-common.sh — shared helpers for start-local-slurm.sh / start-netns-slurm.sh.
# Sourced, not run. Expects DIR, PIDS, LOGS and TAG to be set by the caller.
#
# Every cluster is PRIVATE: its own slurm.conf ($DIR/slurm.conf, used through SLURM_CONF
# and `-f`), state, spool, log and run directories under $DIR, free ports picked at
# start, and its own munged (own key and socket under $DIR/munge, `AuthInfo=socket=`).
# Nothing under /etc is read or written, and daemons not started here are never touched,
# so a machine with its own Slurm keeps its configuration and daemons as they are.
#
# Binaries: the system's Slurm 22.05 and munge if installed; otherwise the Debian
# packages are downloaded (`apt-get download`, no install: dpkg's database and /etc stay
# as they are) and unpacked into $RW_SLURM_PREFIX (default /tmp/rankwire-slurm-prefix),
# with wrappers in $RW_SLURM_PREFIX/bin that set the library path.

log() { printf '[%s] %s\n' "$TAG" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# alive PIDFILE: the recorded process still exists.
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

require_root() { [ "$(id -u)" = 0 ] || die "must run as root (starts slurmd, which runs jobs as their users)"; }

# Slurm's client commands and daemons, as wrappers or system paths. Sets SBIN_SLURMCTLD,
# SBIN_SLURMD, SBIN_SLURMSTEPD, SBIN_MUNGED, BIN (directory to put first on PATH, or
# empty for the system's), PLUGIN_DIR (empty: the built-in default) and MUNGE_BIN.
_slurm_pkgs=(slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge libmunge2)
_slurm_libs=(libhwloc15 libnuma1 liblua5.1-0 libltdl7 libreadline8 liblz4-1 libjson-c5 libyaml-0-2 libdbus-1-3 libpam0g libgcrypt20)
ensure_binaries() {
  if [ "${RW_SLURM_PRIVATE_BIN:-0}" != 1 ] && [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] &&
     [ -x /usr/sbin/slurmstepd ] && [ -x /usr/sbin/munged ] && command -v srun >/dev/null; then
    SBIN_SLURMCTLD=/usr/sbin/slurmctld SBIN_SLURMD=/usr/sbin/slurmd
    SBIN_SLURMSTEPD=/usr/sbin/slurmstepd SBIN_MUNGED=/usr/sbin/munged
    BIN= PLUGIN_DIR= MUNGE_BIN=munge UNMUNGE_BIN=unmunge
    return 0
  fi
  local pfx=${RW_SLURM_PREFIX:-/tmp/rankwire-slurm-prefix}
  local root=$pfx/root
  local arch_lib=usr/lib/x86_64-linux-gnu
  if [ ! -x "$root/usr/sbin/slurmd-wlm" ] || [ ! -x "$root/usr/sbin/munged" ]; then
    [ "${RW_SLURM_NO_INSTALL:-0}" = 1 ] && die "no Slurm installed and RW_SLURM_NO_INSTALL=1"
    command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null ||
      die "no Slurm installed, and no apt-get/dpkg-deb to fetch one (Debian 12 packages)"
    local p need=("${_slurm_pkgs[@]}")
    for p in "${_slurm_libs[@]}"; do
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
    done
    log "no system Slurm: fetching ${need[*]} into $pfx (not installed: /etc and dpkg untouched)"
    rm -rf "$pfx/debs" "$root"
    mkdir -p "$pfx/debs" "$root"
    chmod 0777 "$pfx/debs" # apt's _apt user writes there
    (cd "$pfx/debs" && timeout 300 apt-get -q download "${need[@]}" >/dev/null 2>&1) ||
      { timeout 300 apt-get -o DPkg::Lock::Timeout=300 update >/dev/null 2>&1 &&
        (cd "$pfx/debs" && timeout 300 apt-get -q download "${need[@]}" >/dev/null 2>&1); } ||
      die "apt-get download ${need[*]} failed"
    for p in "$pfx"/debs/*.deb; do dpkg-deb -x "$p" "$root" || die "dpkg-deb -x $p failed"; done
  fi
  local lib=$root/$arch_lib:$root/$arch_lib/slurm-wlm:$root/lib/x86_64-linux-gnu
  mkdir -p "$pfx/bin"
  local b real
  for b in srun sbatch scancel squeue sinfo scontrol salloc sacct munge unmunge \
           slurmctld slurmd slurmstepd munged; do
    case $b in
      slurmctld|slurmd|slurmstepd) real=$root/usr/sbin/$b-wlm ;;
      munged) real=$root/usr/sbin/munged ;;
      *) real=$root/usr/bin/$b ;;
    esac
    [ -x "$real" ] || continue
    # A wrapper (not exec -a): the daemons are started with setsid, and `exec` keeps the
    # PID, so recorded PIDs stay the daemons'.
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' \
      "$lib" "$real" >"$pfx/bin/$b"
    chmod 0755 "$pfx/bin/$b"
  done
  SBIN_SLURMCTLD=$pfx/bin/slurmctld SBIN_SLURMD=$pfx/bin/slurmd
  SBIN_SLURMSTEPD=$pfx/bin/slurmstepd SBIN_MUNGED=$pfx/bin/munged
  BIN=$pfx/bin PLUGIN_DIR=$root/$arch_lib/slurm-wlm
  MUNGE_BIN=$pfx/bin/munge UNMUNGE_BIN=$pfx/bin/unmunge
  export PATH=$BIN:$PATH
}

munge_ok() { timeout 5 "$MUNGE_BIN" -S "$MUNGE_SOCKET" -n 2>/dev/null | timeout 5 "$UNMUNGE_BIN" -S "$MUNGE_SOCKET" >/dev/null 2>&1; }

# This cluster's own munged: own key, socket, pid, log and seed files under $DIR/munge
# (key directory 0700; the socket's directory is world-searchable so that jobs of any
# user reach it). Started unless the recorded one still answers.
ensure_munge() {
  MUNGE_SOCKET=$DIR/munge/run/munge.socket
  install -d -m 0755 "$DIR/munge" "$DIR/munge/run"
  install -d -m 0700 "$DIR/munge/key"
  if [ ! -s "$DIR/munge/key/munge.key" ]; then
    dd if=/dev/urandom of="$DIR/munge/key/munge.key" bs=1 count=1024 status=none
    chmod 0400 "$DIR/munge/key/munge.key"
  fi
  if alive "$PIDS/munged.pid" && munge_ok; then
    return 0
  fi
  rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
  # setsid and the wrapper exec, so $! is munged itself; -F = foreground.
  setsid "$SBIN_MUNGED" -F --force --socket="$MUNGE_SOCKET" \
    --key-file="$DIR/munge/key/munge.key" --pid-file="$DIR/munge/run/munged.pid" \
    --log-file="$LOGS/munged.log" --seed-file="$DIR/munge/key/munged.seed" \
    >"$LOGS/munged.out" 2>&1 </dev/null &
  echo $! >"$PIDS/munged.pid"
  local _
  for _ in $(seq 50); do munge_ok && return 0; sleep 0.1; done
  die "munged did not come up; see $LOGS/munged.out"
}

port_in_use() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# free_port ADDR: a TCP port nobody listens on (at ADDR or any address), from 30000-59999.
free_port() {
  local p _
  for _ in $(seq 200); do
    p=$((30000 + RANDOM % 30000))
    if command -v ss >/dev/null && [ -n "$(ss -Htan "sport = :$p" 2>/dev/null)" ]; then continue; fi
    port_in_use "$1" "$p" || port_in_use 127.0.0.1 "$p" || { echo "$p"; return 0; }
  done
  die "no free TCP port found"
}

# common_conf CLUSTER CTLD_HOST CTLD_ADDR CTLD_PORT SLURMD_PORT MPI_PORTS
# Prints the slurm.conf lines shared by both layouts (no NodeName/PartitionName).
common_conf() {
  cat <<EOC
ClusterName=$1
SlurmctldHost=$2($3)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# This cluster's own munged (never the system's /run/munge socket).
AuthInfo=socket=$MUNGE_SOCKET
SlurmctldPort=$4
SlurmdPort=$5
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/slurmd-%n
# Per cluster and node: the PMIx plugin puts each step's client directory there
# (spmix_appdir_<uid>_<job>.<step>). In the default /tmp, the netns nodes (one /tmp)
# and two clusters whose job ids both restart at 1 collide ("File exists") and the
# step fails to launch.
TmpFS=$DIR/tmp/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
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
EOC
  [ -n "$PLUGIN_DIR" ] && echo "PluginDir=$PLUGIN_DIR"
  return 0
}

# write_env: $DIR/env, for clients: `. $DIR/env` sets SLURM_CONF (and PATH when the
# binaries are the private ones).
write_env() {
  {
    echo "export SLURM_CONF=$DIR/slurm.conf"
    [ -n "$BIN" ] && echo "export PATH=$BIN:\$PATH"
    true
  } >"$DIR/env"
}
