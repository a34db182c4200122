#!/usr/bin/env bash
# The MPI standard ABI on the GPU machine (issue 20): run there from the repository root
# after scripts/gpu-build.sh here (binaries in .device-bin/, carried):
#   scripts/gpu-abi.sh OUTDIR
# 1. abi/tests/gpu/gpu_buffers.c (device buffers through every kind of call) built with
#    abi/bin/mpicc against .device-bin/lib/libmpi_abi.so.1 and libcudart, at 2 ranks
#    without MPS, then at 2 and 4 ranks with MPS (scripts/mps.sh), and at 2 and 3 ranks
#    with MPS and the memory-kind agreement off (so that the nonblocking calls take the
#    device collectives too);
# 2. the host-buffer C tests of abi/tests/c at 2 ranks (the same library on that machine);
# 3. OSU 7.2 built with CUDA support (scripts/osu.sh --cuda; the tarball gpu-build.sh
#    copied into .device-bin/) at 2 ranks with MPS: device-buffer latency, bandwidth and
#    collectives, with validation, and the same benchmarks on host buffers.
# Everything goes to OUTDIR (logs, summary.txt).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-abi.sh OUTDIR}
mkdir -p "$out"
B=$(pwd)/.device-bin
export RANKWIRE_ABI_LIBDIR=$B/lib
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH=$CUDA_HOME/bin:$PATH
sum=$out/summary.txt
: >"$sum"
note() { echo "$*" | tee -a "$sum"; }
run() { # name, command...
  local name=$1; shift
  local t0=$SECONDS
  timeout -k 5 "${RUN_TIMEOUT:-300}" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  note "$name: rc=$rc ($((SECONDS - t0)) s) $(grep -h -E 'ok, [0-9]+ checks|gpu_buffers:|mixed_buffers:' "$out/$name.log" | tr '\n' ' ' | cut -c1-300)"
}
abi/bin/mpicc -O2 abi/tests/gpu/gpu_buffers.c -I"$CUDA_HOME/include" -L"$CUDA_HOME/lib64" -lcudart \
  -Wl,-rpath,"$CUDA_HOME/lib64" -o /tmp/gpu_buffers >"$out/build.log" 2>&1 || note "gpu_buffers: build failed (build.log)"
for c in abi/tests/c/*.c; do
  n=$(basename "$c" .c)
  abi/bin/mpicc -O1 "$c" -o "/tmp/abi-$n" -lm >>"$out/build.log" 2>&1 || note "$n: build failed"
done
abi/bin/mpicc -O2 abi/tests/gpu/mixed_buffers.c -I"$CUDA_HOME/include" -L"$CUDA_HOME/lib64" -lcudart \
  -Wl,-rpath,"$CUDA_HOME/lib64" -o /tmp/mixed_buffers >>"$out/build.log" 2>&1 || note "mixed_buffers: build failed (build.log)"
run gpu_buffers_2 "$B/rwrun" -n 2 /tmp/gpu_buffers
# Host and device buffers mixed in one collective (memkind.rs): device on rank 0 only,
# on rank 1 only, on both (the device path, after the agreement), and on both with the
# agreement off (the device path without it: the time it costs).
for m in 1 2 3; do run "mixed_buffers_2_m$m" "$B/rwrun" -n 2 /tmp/mixed_buffers $m; done
run mixed_buffers_2_m3_off env RANKWIRE_ABI_MEMORY_AGREEMENT=off "$B/rwrun" -n 2 /tmp/mixed_buffers 3
# The negative control: a mix with the agreement off must fail (hang or abort) here.
RUN_TIMEOUT=30 run mixed_buffers_2_m1_off env RANKWIRE_ABI_MEMORY_AGREEMENT=off "$B/rwrun" -n 2 /tmp/mixed_buffers 1
# GPU_ABI_QUICK=1: without the host-buffer C tests and OSU (the device tests only).
[ "${GPU_ABI_QUICK:-0}" = 1 ] || for c in abi/tests/c/*.c; do
  n=$(basename "$c" .c)
  run "host_${n}_2" "$B/rwrun" -n 2 "/tmp/abi-$n"
done
# shellcheck source=mps.sh
. scripts/mps.sh
if mps_start /tmp/mps-pipe /tmp/mps-log; then
  note "MPS started"
  run gpu_buffers_2_mps "$B/rwrun" -n 2 /tmp/gpu_buffers
  run gpu_buffers_4_mps "$B/rwrun" -n 4 /tmp/gpu_buffers
  # Without the agreement every rank decides from its own buffers, and the nonblocking
  # calls on device buffers take the device collectives (with it they are staged).
  run gpu_buffers_2_mps_agree_off env RANKWIRE_ABI_MEMORY_AGREEMENT=off "$B/rwrun" -n 2 /tmp/gpu_buffers
  run gpu_buffers_3_mps_agree_off env RANKWIRE_ABI_MEMORY_AGREEMENT=off "$B/rwrun" -n 3 /tmp/gpu_buffers
  for m in 1 3; do run "mixed_buffers_2_m${m}_mps" "$B/rwrun" -n 2 /tmp/mixed_buffers $m; done
  run mixed_buffers_2_m3_off_mps env RANKWIRE_ABI_MEMORY_AGREEMENT=off "$B/rwrun" -n 2 /tmp/mixed_buffers 3
  for m in 5 6 7; do run "mixed_buffers_3_m${m}_mps" "$B/rwrun" -n 3 /tmp/mixed_buffers $m; done
  if [ "${GPU_ABI_QUICK:-0}" = 1 ]; then
    note "osu: skipped (GPU_ABI_QUICK=1)"
  elif ls "$B"/osu-micro-benchmarks-7.2.tar.gz >/dev/null 2>&1; then
    t0=$SECONDS
    OSU_TARBALL=$B/osu-micro-benchmarks-7.2.tar.gz MPICC=$(pwd)/abi/bin/mpicc MPICXX=$(pwd)/abi/bin/mpicxx \
      MPIEXEC="$B/rwrun" ABI_LIBDIR="$B/lib" OSU_NP=2 OSU_ALLOW_FAIL=1 \
      OSU_ONLY='osu_latency$|osu_bw$|osu_bibw$|osu_allreduce$|osu_bcast$|osu_allgather$|osu_reduce$|osu_iallreduce$' \
      OSU_ARGS='-m 1:4194304 -i 100 -x 10' \
      timeout 900 scripts/osu.sh --cuda >"$out/osu_cuda.log" 2>&1
    note "osu --cuda: rc=$? ($((SECONDS - t0)) s)"
    cp target/osu/summary.txt "$out/osu_cuda_summary.txt" 2>/dev/null
    cp -r target/osu/logs "$out/osu_cuda_logs" 2>/dev/null
    cp target/osu/build-*-cuda/make.log "$out/osu_cuda_make.log" 2>/dev/null
    # Timing pass: the same CUDA-mode binaries without validation (`-c` rewrites and
    # checks the buffers around every call), device buffers and then host buffers, at
    # OSU's own iteration counts (sizes up to 4 MiB). Figures in osu_time_*.log.
    ob=$(ls -d target/osu/build-*-cuda 2>/dev/null | head -1)
    if [ -n "$ob" ]; then
      for spec in "latency:pt2pt/standard/osu_latency" "bw:pt2pt/standard/osu_bw" \
                  "allreduce:collective/blocking/osu_allreduce" "bcast:collective/blocking/osu_bcast"; do
        b=${spec%%:*} exe=$ob/c/mpi/${spec#*:}
        case $b in latency | bw) dev=(-d cuda D D) ;; *) dev=(-d cuda) ;; esac
        run "osu_time_${b}_D" env LD_LIBRARY_PATH="$B/lib" "$B/rwrun" -n 2 "$exe" -m 1:4194304 "${dev[@]}"
        run "osu_time_${b}_H" env LD_LIBRARY_PATH="$B/lib" "$B/rwrun" -n 2 "$exe" -m 1:4194304
      done
      # Reference: the same binaries on MPICH 5.0.2's ABI library (not CUDA-aware),
      # launched by its mpiexec: what a user of these binaries gets from another MPI.
      if [ -f "$B/mpich-abi.tgz" ]; then
        m=/tmp/mpich-abi && rm -rf "$m" && mkdir -p "$m" && tar xzf "$B/mpich-abi.tgz" -C "$m"
        for spec in "latency:pt2pt/standard/osu_latency" "bw:pt2pt/standard/osu_bw" \
                    "allreduce:collective/blocking/osu_allreduce"; do
          b=${spec%%:*} exe=$ob/c/mpi/${spec#*:}
          case $b in latency | bw) dev=(-d cuda D D) ;; *) dev=(-d cuda) ;; esac
          RUN_TIMEOUT=60 run "osu_mpich_${b}_D" env LD_LIBRARY_PATH="$m/lib" "$m/bin/mpiexec" -n 2 "$exe" -m 1:4194304 "${dev[@]}"
          run "osu_mpich_${b}_H" env LD_LIBRARY_PATH="$m/lib" "$m/bin/mpiexec" -n 2 "$exe" -m 1:4194304
        done
        for f in "$out"/osu_mpich_*.log; do
          note "$(basename "$f" .log): last lines: $(tail -3 "$f" | tr '\n' ' ' | cut -c1-240)"
        done
      fi
      for f in "$out"/osu_time_*.log "$out"/osu_mpich_*.log; do
        note "$(basename "$f" .log): $(grep -E '^(1|8|1024|65536|1048576|4194304)[[:space:]]' "$f" | awk '{printf "%s=%s ", $1, $2}')"
      done
    fi
  else
    note "osu: no tarball in .device-bin"
  fi
  mps_stop
else
  note "MPS could not be started: MPS runs skipped"
fi
cat "$sum"
