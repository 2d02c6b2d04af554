#!/usr/bin/env bash
# Installs the Debian packages Switchboard needs. Usage: scripts/deps.sh [run|test]
#   run   what building and running the gateway needs
#   test  that, plus what the test suite needs
# As root it installs what is missing with apt-get; otherwise it prints the
# exact command to run and fails.
set -euo pipefail

what=${1:-run}
pkgs=(build-essential cmake pkg-config
      libuv1-dev libwebsockets-dev libwebsockets-evlib-uv libcurl4-openssl-dev
      libjansson-dev libyaml-dev libsodium-dev libsqlite3-dev libgit2-dev bubblewrap libseccomp-dev
      libpcre2-dev zlib1g-dev libzstd-dev
      tzdata)
if [ "$what" = test ]; then
  pkgs+=(libcmocka-dev sqlite3 clang)
  # make install's test (tests/install/): the man page rendered with
  # warnings on, and the unit checked by systemd-analyze verify (the test
  # never needs systemd running).
  pkgs+=(groff-base man-db systemd)
  # The web UI's browser test (tests/browser/): headless chromium driven by
  # playwright-core from npm, and a font to render the pages' screenshots.
  pkgs+=(chromium fonts-dejavu-core)
  # switchboard eval's test parses the JUnit XML it writes with xmllint.
  pkgs+=(libxml2-utils)
  # The test peers are Node.js programs; a node already on PATH will do.
  command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
fi

missing=()
for p in "${pkgs[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [ "$status" = installed ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "switchboard: missing Debian packages: ${missing[*]}" >&2
  echo "run:  sudo apt-get update && sudo $cmd" >&2
  exit 1
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
$cmd
