#!/usr/bin/env bash
# Runs one failalloc_<test> binary once per chosen N with the N-th allocation
# failing (tests/failalloc/failalloc.c), and fails when any run crashes:
# a signal, or a sanitizer report (use after free, double free, ...). A test
# whose own assertions fail because an operation answered SB_ERR_NOMEM is
# what is expected; a crash is a goto-out path that is wrong.
# Usage: run.sh BINARY [RUNS]   (RUNS: how many N, spread over the count; 40)
# Replay one: SB_FAILALLOC=<N> BINARY
set -uo pipefail
bin=$1
runs=${2:-40}
name=$(basename "$bin")
log=$(mktemp)
trap 'rm -f "$log"' EXIT
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

SB_FAILALLOC=0 "$bin" >"$log" 2>&1
total=$(sed -n 's/^failalloc: \([0-9]*\) allocations$/\1/p' "$log" | tail -1)
if [ -z "$total" ] || [ "$total" -eq 0 ]; then
  echo "$name: no allocation count (did it link failalloc.c?)"; tail -20 "$log"; exit 1
fi
# The first allocations one by one (set-up paths), then evenly spread.
ns=$(seq 1 $(( runs / 2 < total ? runs / 2 : total )))
step=$(( total / (runs - runs / 2) )); [ "$step" -lt 1 ] && step=1
ns="$ns $(seq $(( runs / 2 + 1 )) "$step" "$total")"
bad=0
for n in $ns; do
  SB_FAILALLOC=$n timeout 60 "$bin" >"$log" 2>&1
  rc=$?
  if [ $rc -ge 124 ] || grep -qE 'ERROR: (Address|Leak|UndefinedBehavior)Sanitizer|runtime error:|invariant broken|Test failed with exception' "$log"; then
    echo "$name: allocation $n of $total: exit $rc   (replay: SB_FAILALLOC=$n $bin)"
    grep -m12 -E 'ERROR:|runtime error|#[0-9] |invariant|failalloc:' "$log" | sed 's/^/    /'
    bad=$((bad + 1))
  fi
done
echo "$name: $(echo $ns | wc -w) runs over $total allocations, $bad crashed"
[ $bad -eq 0 ]
