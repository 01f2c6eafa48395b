#!/usr/bin/env bash
# Quick start, command 1: install what is needed, then run the proxy on 127.0.0.1:8080.
# Any arguments are passed to `swarmproxy run` (see `swarmproxy run --help`).
set -euo pipefail
source "$(dirname "$0")/bootstrap.sh"
exec swarmproxy run "$@"
