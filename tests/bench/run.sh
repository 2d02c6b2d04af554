#!/usr/bin/env bash
# Prints the gateway's benchmark figures as `name: value` lines.
#   tests/bench/run.sh BUILD_DIR      (make bench builds an optimised BUILD_DIR first)
# Environment: RUNS (start-ups, default 30), IDLE (seconds before reading memory, default 10),
# AGENT_COUNTS (default "1 100 632"), MESSAGES and LEVELS (pipeline, default 400 and 1,8,64),
# ECHO_MESSAGES (the pipeline driver's own ceiling, default 5000), COUNT_MESSAGES (the pipeline's
# system-call counting phase, default MESSAGES/4), PERF=0 (no counting phase), NODE_PIPELINE=1.
# The side-by-side run with OpenClaw is tests/bench/openclaw.sh (make bench-openclaw).
set -euo pipefail
cd "$(dirname "$0")/../.."
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
# Start-up with a fleet: 1, 100 and 632 agents, each with its own workspace
# (copies of the default one), a webhook hook and the web chat configured.
# A Telegram bot long-polls a local fake Bot API (tests/fakes/fake_telegram.js)
# so that idle memory includes a poller with a request open.
tg_out=$(mktemp)
exec {tg_in}> >(node tests/fakes/fake_telegram.js 0 "777:BENCH-token" >"$tg_out")
for _ in $(seq 1 100); do grep -q PORT "$tg_out" && break; sleep 0.05; done
TG_PORT=$(awk '/PORT/ {print $2}' "$tg_out")
for n in ${AGENT_COUNTS:-1 100 632}; do
  fleet="$home/fleet$n"
  mkdir -p "$fleet"
  SWITCHBOARD_HOME="$fleet" "$bin" init >/dev/null
  {
    echo "gateway: {bind: 127.0.0.1}"
    echo "log: {level: warn}"
    echo "agents:"
    for i in $(seq 1 "$n"); do
      [ "$i" = 1 ] && echo "  - {id: main, default: true}" && continue
      echo "  - {id: a$i, workspace: workspaces/a$i}"
      cp -r "$fleet/workspaces/main" "$fleet/workspaces/a$i"
    done
    echo "channels:"
    echo "  webchat: {dm_policy: open, allow_from: [\"*\"]}"
    echo "  webhook:"
    echo "    hooks:"
    echo "      - {name: in, verify: bearer, secret: \"bench-bearer-token-0123456789\", mode: none}"
    echo "  telegram:"
    echo "    accounts:"
    echo "      - {id: bench, token: \"777:BENCH-token\", api_base: \"http://127.0.0.1:$TG_PORT\", poll_timeout: 30s}"
  } >"$fleet/switchboard.yaml"
  "$build/readyprobe" "$bin" "$fleet" "$runs" "$( [ "$n" = 1 ] && echo "$idle" || echo 1)" |
    sed -n "s/^startup_to_ready_ms_\(median\|min\|max\)/agents_${n}_startup_ms_\1/p; s/^idle_\(rss\|private\)_kib/agents_${n}_idle_\1_kib/p"
done
exec {tg_in}>&-
rm -f "$tg_out"
# The routing table: compile time, memory and decisions per second with 10, 1,000 and 10,000 bindings.
"$build/bench_bindings"
# The store: inbox_put throughput with group commit (256 outstanding) and one at a time (an fsync each).
"$build/bench_store"
# Compact JSON of the message path's values: jansson's json_dumps against the gateway's writer.
"$build/bench_json"
# The agent runtime: time per turn without model time (scripted provider, 3 tool calls) and memory per loaded session history.
"$build/bench_turn"
# Webhooks end to end: signed webhook -> scripted agent (one tool call) -> signed callback, at 1, 8 and 64
# concurrent closed-loop senders, driven by the C load generator bench_pipeline (one thread, about
# 20 us of its own CPU per message). First its own ceiling against a stand-in that calls back at once,
# then the gateway with the in-process scripted provider, then with the OpenAI-compatible scripted
# model server over HTTP (bench_llm.js). Per level: throughput, latency, and the gateway's CPU, bytes
# written, system calls and fsyncs per message. NODE_PIPELINE=1 also runs the older Node driver
# (tests/bench/bench_webhooks.sh, webhook_* figures), whose own CPU cost (about 1 ms per message)
# shares the cores with the gateway.
levels=${LEVELS:-1,8,64}
messages=${MESSAGES:-400}
"$build/bench_pipeline" --echo "${ECHO_MESSAGES:-5000}" "$levels"
mkdir "$home/pipeline"
SWITCHBOARD_HOME="$home/pipeline" "$bin" init >/dev/null
"$build/bench_pipeline" "$bin" "$home/pipeline" "$messages" "$levels"
if command -v node >/dev/null; then
  llm_out=$(mktemp)
  exec {llm_in}> >(node tests/bench/bench_llm.js 0 >"$llm_out")
  for _ in $(seq 1 100); do grep -q PORT "$llm_out" && break; sleep 0.05; done
  mkdir "$home/pipeline_http"
  SWITCHBOARD_HOME="$home/pipeline_http" "$bin" init >/dev/null
  LLM_PORT=$(awk '/PORT/ {print $2}' "$llm_out") PIPELINE_PREFIX=pipeline_http_ \
    "$build/bench_pipeline" "$bin" "$home/pipeline_http" "$messages" "$levels"
  exec {llm_in}>&-
  rm -f "$llm_out"
fi
if [ "${NODE_PIPELINE:-0}" = 1 ]; then
  LEVELS=$levels MESSAGES=$messages IDLE=$idle tests/bench/bench_webhooks.sh "$build"
fi
# The web UI: its size and first paint on loopback, in headless chromium
# (installed by `make test`'s deps; skipped here when it is not there).
if [ -x /usr/bin/chromium ] && [ -d tests/fakes/node_modules/playwright-core ]; then
  node tests/bench/ui_paint.js "$bin" "${UI_RUNS:-20}"
else
  echo "ui_first_paint: skipped (needs /usr/bin/chromium and tests/fakes' npm packages: make test-deps)"
fi
