#!/usr/bin/env bash
# Runs every libFuzzer harness for a bounded time and prints executions and
# crashes per harness.
#   tests/fuzz/run.sh BUILD_DIR [SECONDS] [HARNESS...]
# SECONDS defaults to $FUZZ_SECONDS, else 60 (`make fuzz FUZZ_SECONDS=10` is
# the CI smoke). HARNESS names (fuzz_control, ...) pick some; default: all.
# FUZZ_JOBS=N runs N harnesses at a time (default 1). Each harness starts from
# its seed corpus tests/fuzz/corpus/<name> (copied: the seeds are not
# changed); crash inputs go to build/fuzz-artifacts/. Exit status 1 when any
# harness crashed (or found a leak, or a property check failed).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$1
secs=${2:-${FUZZ_SECONDS:-60}}
shift $(( $# >= 2 ? 2 : $# ))
jobs=${FUZZ_JOBS:-1}
mkdir -p build/fuzz-artifacts
bins=()
if [ $# -gt 0 ]; then
  for n in "$@"; do bins+=("$build/$n"); done
else
  for b in "$build"/fuzz_*; do [ -x "$b" ] && bins+=("$b"); done
fi
[ ${#bins[@]} -gt 0 ] || { echo "fuzz: no harness in $build (make fuzz builds them)" >&2; exit 1; }
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT

one() {
  local bin=$1 name work
  name=$(basename "$bin")
  work=$(mktemp -d)
  cp -r "tests/fuzz/corpus/${name#fuzz_}"/. "$work"/ 2>/dev/null || true
  if "$bin" -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=2048 \
       -artifact_prefix="build/fuzz-artifacts/$name-" "$work" >"$results/$name.log" 2>&1; then
    echo ok >"$results/$name.status"
  else
    echo CRASH >"$results/$name.status"
  fi
  rm -rf "$work"
}

running=0
for bin in "${bins[@]}"; do
  one "$bin" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
done
wait || true

status=0
for bin in "${bins[@]}"; do
  name=$(basename "$bin")
  result=$(cat "$results/$name.status" 2>/dev/null || echo CRASH)
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$results/$name.log" | grep -o '[0-9]*$' || echo 0)
  if [ "$result" != ok ]; then status=1; tail -40 "$results/$name.log"; fi
  echo "$name: $result, $execs executions in ${secs}s"
done
exit $status
