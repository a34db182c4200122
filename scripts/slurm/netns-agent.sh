#!/bin/sh
# netns-agent.sh HOST COMMAND_LINE — a launch agent for `rwrun --host` (set
# RANKWIRE_LAUNCH_AGENT="scripts/slurm/netns-agent.sh {host}") that starts COMMAND_LINE
# (a /bin/sh command line, as rwrun passes it) "on" node HOST (nnI) of the cluster of
# start-netns-slurm.sh: inside network namespace rwnI, in a fresh UTS namespace with
# hostname HOST. Like ssh, but for the namespaces on this machine. nsenter, unshare and
# sh all exec, so the rank is this process (signals from rwrun reach it directly).
set -eu
host=$1
line=$2
i=${host#nn}
case "$i" in
  ''|*[!0-9]*) echo "netns-agent: host '$host' is not nnI" >&2; exit 2 ;;
esac
[ -e "/var/run/netns/rwn$i" ] || { echo "netns-agent: no namespace rwn$i (start-netns-slurm.sh)" >&2; exit 2; }
exec nsenter --net="/var/run/netns/rwn$i" unshare --uts \
  sh -c 'hostname "$1" && exec sh -c "$2"' netns-agent "$host" "$line"
