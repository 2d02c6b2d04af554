#!/usr/bin/env bash
# Source checks that CI runs with the tests:
#  1. banned C functions (unbounded or unsafe): sprintf strcpy strcat strtok atoi gets
#  2. the layering of DESIGN §1: channels/ bindings/ agents/ workspaces/ include
#     only gateway/core/ (and, for agents/, workspaces/), never daemon internals.
# Prints each violation as FILE:LINE: what and exits 1 if there is any.
set -uo pipefail
cd "$(dirname "$0")/.."

status=0
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find . -name '*.c' -o -name '*.h')

banned='(^|[^a-zA-Z0-9_])(sprintf|vsprintf|strcpy|strcat|strtok|atoi|atol|atoll|gets)[[:space:]]*\('
if out=$(grep -nE "$banned" $files | grep -vE ':[0-9]+:[[:space:]]*(\*|//)'); then
  echo "$out" | sed 's/$/   <- banned function (use snprintf, buf_*, num_parse_*)/'
  status=1
fi

for mod in channels bindings agents workspaces; do
  allowed='gateway/core/'
  [ "$mod" = agents ] && allowed='gateway/core/|workspaces/'
  for f in $(printf '%s\n' $files | grep "^$mod/"); do
    while IFS= read -r line; do
      inc=$(echo "$line" | sed -E 's/^[0-9]+:#include "([^"]+)".*/\1/')
      case "$inc" in
        "$mod"/*) continue ;;
      esac
      if ! echo "$inc" | grep -qE "^($allowed)"; then
        echo "$f:${line%%:*}: includes \"$inc\"   <- $mod/ may include only ${allowed//|/ or }"
        status=1
      fi
    done < <(grep -nE '^#include "' "$f")
  done
done
exit $status
