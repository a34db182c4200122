# step NAME TIMEOUT CMD... — one step of the GPU scripts (sourced by scripts/gpu-run.sh and
# scripts/gpu-staging.sh, not run on its own): runs CMD under `timeout -k 5 TIMEOUT`, its
# output in $OUT/NAME.log (the last 40 lines echoed), a line before and after in
# $OUT/summary.txt, and counts a nonzero exit in $fails. Where the caller defines a
# function `wanted`, a step it rejects (wanted NAME fails) is skipped.
step() {
  local name=$1 t=$2; shift 2
  if declare -F wanted >/dev/null && ! wanted "$name"; then return 0; fi
  echo "=== $name: $*" | tee -a "$OUT/summary.txt"
  timeout -k 5 "$t" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 40 "$OUT/$name.log"
  echo "=== $name: exit $rc" | tee -a "$OUT/summary.txt"
  [ $rc = 0 ] || fails=$((fails + 1))
}
