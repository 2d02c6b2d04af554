#!/usr/bin/env bash
# Webhook pipeline benchmark: signed webhook -> inbox -> scripted agent (one
# `ls` tool call) -> outbox -> signed callback to a receiver on 127.0.0.1, with
# 1 and 8 closed-loop concurrent senders. Prints `name: value` lines.
#   tests/bench/bench_webhooks.sh [BUILD_DIR]   (default build/bench, a Release build)
# Environment: MESSAGES (round trips per level, default 400), LEVELS (default 1,8).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/bench}
bin="$build/switchboard"
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
if ! { [ -f "$build/CMakeCache.txt" ] ||
       cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSB_TESTS=OFF; } >"$home/build.log" 2>&1 ||
   ! cmake --build "$build" -j"$(nproc)" --target switchboard >>"$home/build.log" 2>&1; then
  cat "$home/build.log" >&2
  exit 1
fi
if ! command -v node >/dev/null || [ ! -d tests/fakes/node_modules/standardwebhooks ]; then
  echo "webhook_bench: skipped (needs node and 'cd tests/fakes && npm ci')"
  exit 0
fi
mkdir "$home/home"
SWITCHBOARD_HOME="$home/home" "$bin" init >/dev/null
node tests/bench/bench_webhooks.js "$bin" "$home/home" "${MESSAGES:-400}" "${LEVELS:-1,8}"
