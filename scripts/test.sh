#!/usr/bin/env bash
# Quick start, command 2: install what is needed, then run the whole test suite.
# Any arguments are passed to pytest.
set -euo pipefail
# The test tools, and the lab's dependencies: tests/bench and the libtorrent test vectors need them.
SWARMPROXY_EXTRAS=test,lab
source "$(dirname "$0")/bootstrap.sh"
# Real clients and reference servers the end-to-end tests drive.
missing=()
for tool in curl wget openssl; do command -v "$tool" >/dev/null || missing+=("$tool"); done
[ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
cd "$root"
exec python -m pytest -q -p no:cacheprovider "$@"
