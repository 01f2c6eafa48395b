#!/usr/bin/env bash
# Builds the Debian package from this repository: dist/swarmproxy_VERSION-1_ARCH.deb (Debian 12, Python 3.11).
#
#   bash scripts/build-deb.sh            build it
#   bash scripts/build-deb.sh --lint     build it, then run lintian on it (installing lintian with apt if missing)
#
# The package carries swarmproxy and the Python libraries it needs (the versions in .venv, which this script makes
# or updates first, as scripts/run.sh does), its systemd user unit (not enabled; off the public network) and the
# browser extension's builds; scripts/deb_payload.py says what goes where, docs/packaging.md how to install it.
# SWARMPROXY_DEB_OUT and SWARMPROXY_DEB_WORK put the .deb and the build's files elsewhere than dist/ and build/deb/;
# tests/test_build_deb.py builds it so, installs it into an overlay of this machine's root and removes it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
lint=0
for arg in "$@"; do
  case "$arg" in
    --lint) lint=1 ;;
    *) echo "usage: $0 [--lint]" >&2; exit 2 ;;
  esac
done
for tool in dpkg-deb dpkg; do
  command -v "$tool" >/dev/null || { echo "swarmproxy: building a .deb needs $tool (a Debian machine)" >&2; exit 1; }
done
source "$root/scripts/bootstrap.sh"
out="${SWARMPROXY_DEB_OUT:-$root/dist}"
work="${SWARMPROXY_DEB_WORK:-$root/build/deb}"
mkdir -p "$out" "$work"
echo "swarmproxy: building the browser extension" >&2
SWARMPROXY_EXTENSION_OUT="$work/extension" SWARMPROXY_EXTENSION_STAGE="$work/extension-stage" \
  bash "$root/scripts/build-extension.sh" >/dev/null
echo "swarmproxy: laying out the package (swarmproxy and its Python dependencies from .venv)" >&2
"$venv/bin/python" "$root/scripts/deb_payload.py" "$work/root" "$work" "$work/extension"
version=$(sed -n 's/^Version: //p' "$work/root/DEBIAN/control")
arch=$(sed -n 's/^Architecture: //p' "$work/root/DEBIAN/control")
deb="$out/swarmproxy_${version}_${arch}.deb"
# SWARMPROXY_DEB_COMPRESSION=gzip: a quicker build (the test's); xz makes the smaller file
dpkg-deb --build --root-owner-group "-Z${SWARMPROXY_DEB_COMPRESSION:-xz}" "$work/root" "$deb" >/dev/null
echo "swarmproxy: built $deb ($(du -h "$deb" | cut -f1))" >&2
echo "  install: sudo apt install $deb    remove: sudo apt remove swarmproxy" >&2
if [ "$lint" = 1 ]; then
  command -v lintian >/dev/null || apt_install lintian
  lintian --info "$deb" || true
fi
echo "$deb"
