#!/usr/bin/env bash
# Install the Debian packages shadowrt needs to build, test and run, when any is missing.
# Safe to run again: it only calls apt-get when a package is absent.
set -euo pipefail

PKGS=(build-essential cmake pkg-config git
      libinih-dev libcyaml-dev libyaml-dev libsqlite3-dev sqlite3
      check libsubunit-dev libhiredis-dev redis-server
      python3 python3-numpy)

missing=()
for p in "${PKGS[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$p")
	fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "shadowrt: installing missing packages: ${missing[*]}" >&2
SUDO=
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null || { echo "shadowrt: need root or sudo to install ${missing[*]}" >&2; exit 1; }
	SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
