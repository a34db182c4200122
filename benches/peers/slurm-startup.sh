#!/usr/bin/env bash
# benches/peers/slurm-startup.sh: start-up of a rankwire job launched directly by srun,
# PMI-2 against PMIx (issue 21), alternated, under a running Slurm (SLURM_CONF and srun on
# PATH, e.g. `. $RW_SLURM_DIR/env` after scripts/slurm/start-local-slurm.sh).
#   benches/peers/slurm-startup.sh [RANKS...]   (default: 2 8 32; -O above the node's CPUs)
# Each cell: wall time of `srun -O -n N --mpi=M PROGRAM`, where PROGRAM does init, one
# 4-byte allreduce and finalize: `rankwire-bench allreduce` under PMI-2 and PMIx, and, as the
# peer, Open MPI 4.1's peerbench (benches/peers/build/peerbench.openmpi, built by run.sh)
# under PMIx (Debian's Open MPI has no PMI-2 support). REPEATS (default 5) runs per cell,
# the configurations alternated; prints min and median in seconds.
set -euo pipefail
cd "$(dirname "$0")/../.."
bench=${RANKWIRE_BENCH:-target/release/rankwire-bench}
ompi=${OMPI_BENCH:-benches/peers/build/peerbench.openmpi}
[ -x "$bench" ] || { echo "build first: cargo build --release -p rankwire-bench" >&2; exit 1; }
confs=(rankwire-pmi2 rankwire-pmix)
if [ -x "$ompi" ]; then confs+=(ompi-pmix); else echo "# no $ompi (benches/peers/run.sh builds it): Open MPI not measured" >&2; fi
command -v srun >/dev/null || { echo "no srun: start a Slurm (scripts/slurm/start-local-slurm.sh) and source its env" >&2; exit 1; }
reps=${REPEATS:-5}
ranks=("$@"); [ ${#ranks[@]} -gt 0 ] || ranks=(2 8 32)
printf '| ranks | configuration | min (s) | median (s) | runs |\n|---|---|---|---|---|\n'
for n in "${ranks[@]}"; do
  declare -A t=()
  for ((r = 0; r < reps; r++)); do
    for m in "${confs[@]}"; do
      case $m in
        rankwire-pmi2) cmd=(--mpi=pmi2 "$bench" allreduce --min-size 4 --max-size 4 -i 1 --warmup 0) ;;
        rankwire-pmix) cmd=(--mpi=pmix "$bench" allreduce --min-size 4 --max-size 4 -i 1 --warmup 0) ;;
        ompi-pmix) cmd=(--mpi=pmix "$ompi" allreduce -m 4:4 -i 1 -w 0 -I 1 -W 0) ;;
      esac
      s=$(date +%s.%N)
      timeout 120 srun -t 2 -O -n "$n" "${cmd[@]}" >/dev/null
      e=$(date +%s.%N)
      t[$m]+="$(echo "$e - $s" | bc) "
    done
  done
  for m in "${confs[@]}"; do
    read -r -a v <<<"${t[$m]}"
    sorted=$(printf '%s\n' "${v[@]}" | sort -g)
    min=$(echo "$sorted" | head -1); med=$(echo "$sorted" | sed -n "$(( (reps + 1) / 2 ))p")
    printf '| %s | %s | %.3f | %.3f | %s |\n' "$n" "$m" "$min" "$med" "$reps"
  done
  unset t
done
