#!/usr/bin/env bash
# The lab: install what it needs (the proxy, with libtorrent, and the `lab` extra: matplotlib), then run
# `swarmproxy lab` with these arguments, e.g. `bash scripts/lab.sh flashcrowd --quick --out /tmp/lab`.
set -euo pipefail
SWARMPROXY_EXTRAS=lab
source "$(dirname "$0")/bootstrap.sh"
exec swarmproxy lab "$@"
