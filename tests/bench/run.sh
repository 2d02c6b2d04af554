#!/usr/bin/env bash
# Prints the gateway's benchmark figures as `name: value` lines.
#   tests/bench/run.sh BUILD_DIR      (make bench builds an optimised BUILD_DIR first)
# Environment: RUNS (start-ups, default 30), IDLE (seconds before reading memory, default 10).
set -euo pipefail
build=${1:-build/bench}
bin="$build/switchboard"
runs=${RUNS:-30}
idle=${IDLE:-10}
[ -x "$bin" ] || { echo "run.sh: no $bin; run 'make bench'" >&2; exit 1; }

home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
SWITCHBOARD_HOME="$home" "$bin" init >/dev/null

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r)"
echo "version: $("$bin" version)"
stripped="$home/switchboard.stripped"
strip -o "$stripped" "$bin"
echo "binary_bytes: $(stat -c %s "$bin")"
echo "binary_stripped_bytes: $(stat -c %s "$stripped")"
echo "shared_libraries: $(ldd "$bin" | wc -l)"
"$build/readyprobe" "$bin" "$home" "$runs" "$idle"
# The routing table: compile time, memory and decisions per second with 10, 1,000 and 10,000 bindings.
"$build/bench_bindings"
# The agent runtime: time per turn without model time (scripted provider, 3 tool calls) and memory per loaded session history.
"$build/bench_turn"
# Webhooks end to end: signed webhook -> scripted agent (one tool call) -> signed callback, at 1 and 8 concurrent senders.
tests/bench/bench_webhooks.sh "$build"
