#!/usr/bin/env bash
# Source checks that CI runs with the tests:
#  1. banned C functions (unbounded or unsafe): sprintf strcpy strcat strtok atoi gets
#  2. the arrows between rooms (docs/architecture.md, "Modules"): every
#     #include of a file, "..." or <...>, names a header of its own room, of
#     gateway/core/, or of a room its room may use (the table below);
#  3. given a build directory (make test passes its own, after building), the
#     same arrows at link level: every undefined symbol of an object file of
#     the gateway resolves, if one of the gateway's objects defines it, in an
#     object of a room the first one may use (nm).
# Usage: scripts/check-source.sh [BUILD_DIR]
# Prints each violation as FILE:LINE: what (or OBJECT: symbol) and exits 1 if
# there is any.
set -uo pipefail
cd "$(dirname "$0")/.."

status=0
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find . -name '*.c' -o -name '*.h')

banned='(^|[^a-zA-Z0-9_])(sprintf|vsprintf|strcpy|strcat|strtok|atoi|atol|atoll|gets)[[:space:]]*\('
if out=$(grep -nE "$banned" $files | grep -vE ':[0-9]+:[[:space:]]*(\*|//)'); then
  echo "$out" | sed 's/$/   <- banned function (use snprintf, buf_*, num_parse_*)/'
  status=1
fi

# The rooms and the rooms each may use besides itself and gateway/core
# ("*": any). A room is a folder; gateway/main.c, gateway/module.h and
# gateway/store/backends.c (the list of store backends) are rooms of one file.
# Keep in step with docs/architecture.md.
arrows='
gateway/core           -
gateway/module         -
gateway/main           gateway/cli
gateway/obs            -
gateway/cron           -
gateway/store          -
gateway/store/sqlite   gateway/store
gateway/store/backends gateway/store gateway/store/sqlite
gateway/config         gateway/cron agents bindings channels
gateway/http           gateway/config gateway/obs gateway/module
gateway/ui             gateway/config gateway/http gateway/module
gateway/sched          gateway/config gateway/cron gateway/store
gateway/pipeline       gateway/config gateway/cron gateway/obs gateway/store agents bindings channels workspaces
gateway/control        gateway/config gateway/http gateway/obs gateway/pipeline gateway/sched gateway/store gateway/module agents bindings channels workspaces
gateway/cli            *
gateway/daemon         *
channels               -
bindings               -
agents                 workspaces
workspaces             -
'

# room_awk: an awk function mapping a path (source, header, or an object's
# source) to its room, or "" for what is in no room (tests, system headers).
room_awk='
function room(p,   n, a) {
  sub(/^\.\//, "", p)
  n = split(p, a, "/")
  if (a[1] == "generated") {
    if (p ~ /^generated\/workspace_templates/) return "workspaces"
    if (p ~ /^generated\/ui_assets/) return "gateway/ui"
    return ""
  }
  if (a[1] == "channels" || a[1] == "bindings" || a[1] == "agents" || a[1] == "workspaces")
    return n > 1 ? a[1] : ""
  if (a[1] != "gateway" || n < 2) return ""
  if (n == 2) { sub(/\.[ch]$/, "", a[2]); return "gateway/" a[2] }
  if (a[2] == "store" && n == 3 && a[3] ~ /^backends\.[ch]$/) return "gateway/store/backends"
  if (a[2] == "store" && n > 3) return "gateway/store/" a[3]
  return "gateway/" a[2]
}
function allowed(from, to,   list, i, k) {
  if (from == "" || to == "" || from == to || to == "gateway/core") return 1
  list = " " may[from] " "
  return list ~ / \* / || index(list, " " to " ") > 0
}
function load_arrows(text,   lines, n, i, f, k) {
  n = split(text, lines, "\n")
  for (i = 1; i <= n; i++) {
    if (split(lines[i], f, " ") < 1) continue
    may[f[1]] = ""
    for (k = 2; k in f; k++) if (f[k] != "-") may[f[1]] = may[f[1]] " " f[k]
    known[f[1]] = 1
  }
}
'

# 2. includes, both spellings
if out=$(printf '%s\n' $files | grep -vE '^tests/' | while read -r f; do
           grep -nHE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"][^>"]+[>"]' "$f"
         done | awk -v arrows="$arrows" "$room_awk"'
  BEGIN { load_arrows(arrows) }
  {
    file = $0; sub(/:.*/, "", file)
    rest = substr($0, length(file) + 2); line = rest; sub(/:.*/, "", line)
    inc = rest; sub(/^[^<"]*[<"]/, "", inc); sub(/[>"].*$/, "", inc)
    from = room(file); to = (inc ~ /\//) ? room(inc) : ""
    if (from != "" && !(from in known)) {
      printf "%s:%s: file in no known room (%s)   <- add its room to scripts/check-source.sh\n", file, line, from
      next
    }
    if (!allowed(from, to))
      printf "%s:%s: includes %s   <- %s may not use %s (scripts/check-source.sh, docs/architecture.md)\n", file, line, inc, from, to
  }') && [ -n "$out" ]; then
  echo "$out"
  status=1
fi

# 3. link level
build=${1:-}
if [ -n "$build" ]; then
  objs=$(find "$build/CMakeFiles/sb_core.dir" "$build/CMakeFiles/sb_gateway.dir" -name '*.c.o' 2>/dev/null)
  if [ -z "$objs" ]; then
    echo "check-source: no object files under $build (build it first)"
    status=1
  else
    # One line per symbol: "D <object source> <symbol>" or "U <object source> <symbol>",
    # for objects whose source is still in the tree (or generated).
    syms=$(for o in $objs; do
             src=${o#*/CMakeFiles/*.dir/}; src=${src%.o}
             case "$src" in generated/*) ;; *) [ -f "$src" ] || continue ;; esac
             nm -P "$o" 2>/dev/null | awk -v src="$src" '
               $2 == "U" { print "U", src, $1; next }
               $2 ~ /^[TDBRVWC]$/ { print "D", src, $1 }'
           done)
    if out=$(echo "$syms" | awk -v arrows="$arrows" "$room_awk"'
      BEGIN { load_arrows(arrows) }
      $1 == "D" { def[$3] = $2; next }
      $1 == "U" { use[++n] = $2 " " $3 }
      END {
        for (i = 1; i <= n; i++) {
          split(use[i], u, " ")
          if (!(u[2] in def)) continue
          from = room(u[1]); to = room(def[u[2]])
          if (!allowed(from, to))
            printf "%s: uses %s from %s   <- %s may not use %s at link level\n", u[1], u[2], def[u[2]], from, to
        }
      }') && [ -n "$out" ]; then
      echo "$out"
      status=1
    fi
  fi
fi
exit $status
