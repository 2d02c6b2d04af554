#!/usr/bin/env bash
# The soak: SOAK_MESSAGES (default 1,000,000) signed webhooks -> scripted agent
# (one `ls` tool call) -> signed callback, at SOAK_SENDERS (default 8)
# closed-loop senders, each message its own conversation (so as many sessions).
# The gateway's RSS is sampled every SAMPLE_SECONDS; the run fails when the
# last sample is MAX_GROWTH percent (default 2) or more above the sample taken
# after the warm-up (WARMUP messages, default 5%). Then, when a test build is
# given, the kill -9 crash test runs SOAK_CRASH_RUNS more times (default 3)
# with fresh random kill schedules.
#   tests/soak/run.sh [RELEASE_BUILD_DIR] [TEST_BUILD_DIR]
# Prints `name: value` lines and how long it took.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/bench}
testbuild=${2:-}
bin="$build/switchboard"
[ -x "$bin" ] || { echo "soak: no $bin; run 'make soak'" >&2; exit 1; }
[ -d tests/fakes/node_modules/standardwebhooks ] || { echo "soak: run 'cd tests/fakes && npm ci'" >&2; exit 1; }
home=$(mktemp -d "${TMPDIR:-/tmp}/sb-soak.XXXXXX")
trap 'rm -rf "$home"' EXIT
mkdir "$home/home"
SWITCHBOARD_HOME="$home/home" "$bin" init >/dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
start=$(date +%s)
SOAK=${SOAK_MESSAGES:-1000000} PREFIX=soak_ IDLE=${IDLE:-10} \
  node tests/bench/bench_webhooks.js "$bin" "$home/home" 0 "${SOAK_SENDERS:-8}"
echo "soak_wall_seconds: $(( $(date +%s) - start ))"
echo "soak_state_bytes: $(du -sb "$home/home" | cut -f1)"
if [ -n "$testbuild" ] && [ -x "$testbuild/test_crash_webhooks" ]; then
  for i in $(seq 1 "${SOAK_CRASH_RUNS:-3}"); do
    seed=$(( (RANDOM << 15) | RANDOM ))
    if SB_CRASH_SEED=$seed "$testbuild/test_crash_webhooks" >"$home/crash.log" 2>&1; then
      echo "soak_crash_run_$i: ok (seed $seed)"
    else
      tail -60 "$home/crash.log"; echo "soak_crash_run_$i: FAILED (seed $seed)"; exit 1
    fi
  done
fi
