#!/usr/bin/env bash
# Runs every libFuzzer harness for a bounded time and prints executions and
# crashes per harness.  tests/fuzz/run.sh BUILD_DIR [SECONDS]
set -euo pipefail
build=$1
secs=${2:-60}
status=0
for bin in "$build"/fuzz_*; do
  name=$(basename "$bin")
  corpus="tests/fuzz/corpus/${name#fuzz_}"
  work=$(mktemp -d)
  cp -r "$corpus"/. "$work"/ 2>/dev/null || true
  mkdir -p build/fuzz-artifacts
  if "$bin" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix=build/fuzz-artifacts/ "$work" >"$work.log" 2>&1; then
    result=ok
  else
    result=CRASH; status=1; tail -40 "$work.log"
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work.log" | grep -o '[0-9]*$' || echo 0)
  echo "$name: $result, $execs executions in ${secs}s"
  rm -rf "$work" "$work.log"
done
exit $status
