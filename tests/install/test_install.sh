#!/usr/bin/env bash
# test_install.sh - `make install` and `make uninstall` as a packager and an
# operator see them: with DESTDIR=tmp PREFIX=/usr every file lands where
# the FHS and systemd look, the unit's ExecStart names $(PREFIX)/bin, the man
# page renders without a single groff warning and describes every command
# `switchboard --help` lists, the bash completion offers what the binary
# really has, systemd-analyze accepts the unit, and uninstall leaves nothing.
#
# Usage: tests/install/test_install.sh SWITCHBOARD_BINARY
# Exit 0 when every check passes, 1 on the first failure, 77 (ctest's skip)
# when a tool it needs is missing - a failure instead under CI=true.
set -uo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:?usage: test_install.sh SWITCHBOARD_BINARY}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sbinstall.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The CLI must not look at a real home while it prints its help.
export SWITCHBOARD_HOME=$tmp/home HOME=$tmp/nohome
unset MAKEFLAGS MFLAGS

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }
need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "${CI:-}" = true ]; then fail "CI=true, and $1 is not installed (scripts/deps.sh test)"; fi
  echo "skipped: $1 is not installed (Debian: $2)" >&2
  exit 77
}
need groff groff-base
need man man-db
need make make

# ---- make install DESTDIR=... PREFIX=/usr ----
dest=$tmp/dest
make -C "$src" --no-print-directory install DESTDIR="$dest" PREFIX=/usr BINARY="$bin" \
  >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log" >&2; fail "make install"; }
for f in usr/bin/switchboard:755 usr/share/man/man1/switchboard.1:644 \
         usr/share/bash-completion/completions/switchboard:644 \
         usr/lib/systemd/system/switchboard.service:644 usr/lib/sysusers.d/switchboard.conf:644; do
  path=$dest/${f%%:*}
  [ -f "$path" ] || fail "make install did not write /${f%%:*}"
  mode=$(stat -c %a "$path")
  [ "$mode" = "${f##*:}" ] || fail "/${f%%:*} has mode $mode, not ${f##*:}"
done
[ -z "$(find "$dest" -name '*.tmp')" ] || fail "make install left a temporary file"
"$dest/usr/bin/switchboard" --version | grep -q '^switchboard ' || fail "the installed binary does not run"
ok "make install DESTDIR PREFIX=/usr: every file in place with its mode"

# ---- the unit ----
unit=$dest/usr/lib/systemd/system/switchboard.service
grep -qx 'ExecStart=/usr/bin/switchboard gateway' "$unit" || fail "ExecStart is not /usr/bin/switchboard gateway: $(grep ExecStart= "$unit")"
grep -q '^ExecStartPre=.*/usr/bin/switchboard init' "$unit" || fail "ExecStartPre does not run /usr/bin/switchboard init"
! grep -q '@BINDIR@' "$unit" || fail "@BINDIR@ left in the unit"
for line in Type=notify 'ExecReload=/bin/kill -HUP $MAINPID' Restart=on-failure \
            RestartPreventExitStatus=78 StateDirectory=switchboard \
            'Environment=SWITCHBOARD_HOME=%S/switchboard' User=switchboard; do
  grep -qxF "$line" "$unit" || fail "the unit lacks $line"
done
# Options that break bubblewrap (docs/operations.md says why) stay out.
for key in RestrictNamespaces ProtectKernelTunables ProtectKernelLogs ProcSubset \
           ProtectHostname SystemCallFilter MemoryDenyWriteExecute PrivateUsers PrivateNetwork; do
  ! grep -q "^$key=" "$unit" || fail "the unit sets $key=, which breaks the tool sandbox"
done
grep -q '^u switchboard ' "$dest/usr/lib/sysusers.d/switchboard.conf" || fail "sysusers.d has no switchboard user"
ok "unit: ExecStart=/usr/bin/switchboard gateway, Type=notify, 78 stops restarts, no bwrap-breaking option"

# ---- the man page ----
page=$dest/usr/share/man/man1/switchboard.1
out=$(groff -ww -z -man "$page" 2>&1) || fail "groff failed: $out"
[ -z "$out" ] || fail "groff -ww warns: $out"
out=$(MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null) || fail "man -l failed: $out"
[ -z "$out" ] || fail "man --warnings: $out"
text=$(MANWIDTH=80 man -l "$page" 2>/dev/null | col -b 2>/dev/null || MANWIDTH=80 man -l "$page" 2>/dev/null)
commands=$("$bin" --help | awk '/^commands:/ { on = 1; next } on && /^  [a-z]/ { print $1 }')
[ -n "$commands" ] || fail "switchboard --help lists no commands"
for c in $commands; do
  grep -qE "^ {7}$c( |$)" <<<"$text" || fail "the man page has no entry for the command $c"
done
for s in 'EXIT STATUS' ENVIRONMENT FILES SWITCHBOARD_HOME NOTIFY_SOCKET; do
  grep -q "$s" <<<"$text" || fail "the man page lacks $s"
done
grep -qE '^ {7}78 ' <<<"$text" || fail "the man page does not describe exit status 78"
version=$("$bin" --version | awk '{ print $2 }')
grep -q "^\.TH SWITCHBOARD 1 .*\"switchboard $version\"" "$page" || fail "the man page's .TH does not say switchboard $version"
ok "man page: renders without warnings, an entry for each of $(wc -w <<<"$commands") commands, exit 78, version $version"

# ---- bash completion ----
complete_words() {
  bash --norc --noprofile -c '
    source "$1"; shift
    COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    _switchboard; printf "%s\n" "${COMPREPLY[@]}"' sh \
    "$dest/usr/share/bash-completion/completions/switchboard" "$@"
}
got=$(complete_words "$bin" "" | grep -v '^--' | sort)
[ "$got" = "$(sort <<<"$commands")" ] || fail "completing the command offers [$got], the CLI has [$commands]"
[ "$(complete_words "$bin" cr)" = cron ] || fail "'switchboard cr<TAB>' does not complete to cron"
for want in "config:check schema" "cron:add runs" "pairing:approved revoke" "sessions:show" \
            "approvals:approve deny"; do
  c=${want%%:*}
  offered=" $(complete_words "$bin" "$c" "" | tr '\n' ' ') "
  for s in ${want#*:}; do
    [[ $offered == *" $s "* ]] || fail "'switchboard $c <TAB>' does not offer $s (offers:$offered)"
  done
done
for c in $commands; do
  for s in $(complete_words "$bin" "$c" ""); do
    "$bin" "$c" "$s" --help >/dev/null 2>&1 || fail "completion offers 'switchboard $c $s', which the CLI refuses"
  done
done
[[ " $(complete_words "$bin" gateway --p | tr '\n' ' ') " == *" --port "* ]] || fail "'switchboard gateway --p<TAB>' does not offer --port"
ok "bash completion: the CLI's commands, their subcommands and options"

# ---- make uninstall ----
make -C "$src" --no-print-directory uninstall DESTDIR="$dest" PREFIX=/usr >"$tmp/uninstall.log" 2>&1 ||
  { cat "$tmp/uninstall.log" >&2; fail "make uninstall"; }
left=$(find "$dest" -type f)
[ -z "$left" ] || fail "make uninstall left: $left"
ok "make uninstall removes every file"

# ---- systemd-analyze verify, on a unit whose binary exists ----
if ! command -v systemd-analyze >/dev/null 2>&1; then
  [ "${CI:-}" = true ] && fail "CI=true, and systemd-analyze is not installed (scripts/deps.sh test)"
  echo "skipped: systemd-analyze verify (Debian: systemd)" >&2
  exit 0
fi
prefix=$tmp/prefix
make -C "$src" --no-print-directory install PREFIX="$prefix" BINARY="$bin" >"$tmp/install2.log" 2>&1 ||
  { cat "$tmp/install2.log" >&2; fail "make install PREFIX=$prefix"; }
grep -qx "ExecStart=$prefix/bin/switchboard gateway" "$prefix/lib/systemd/system/switchboard.service" ||
  fail "with PREFIX=$prefix, ExecStart does not name $prefix/bin"
out=$(MANPATH=$prefix/share/man systemd-analyze verify "$prefix/lib/systemd/system/switchboard.service" 2>&1) ||
  fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify warns: $out"
ok "systemd-analyze verify accepts the unit (ExecStart=$prefix/bin/switchboard gateway)"
