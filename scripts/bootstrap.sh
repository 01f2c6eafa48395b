# Sourced by run.sh, test.sh and lab.sh: make .venv hold this project and its dependencies.
# Works on a fresh Debian machine with Python 3.11: installs python3-venv with apt when
# the interpreter cannot make a venv, and reinstalls only when pyproject.toml changed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv"
# The optional dependency groups of pyproject.toml to install, comma separated (test.sh: test,lab; lab.sh: lab),
# as a sorted set, so that "lab,test" and "test,lab" are one install.
extras=$(tr ', ' '\n\n' <<<"${SWARMPROXY_EXTRAS:-}" | sed '/^$/d' | sort -u | paste -sd, -)

apt_install() {
  # Only root on a Debian-like machine can do this; otherwise say what is missing.
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "swarmproxy: installing $* with apt-get" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  else
    echo "swarmproxy: please install these Debian packages first: $*" >&2
    return 1
  fi
}

py=${PYTHON:-python3}
if ! "$py" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
  echo "swarmproxy: needs Python >= 3.11 (found: $("$py" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  if ! "$py" -m venv "$venv" 2>/dev/null; then
    rm -rf "$venv"
    apt_install python3-venv
    "$py" -m venv "$venv"
  fi
fi
hash=$(sha256sum < "$root/pyproject.toml" | cut -c1-16)
stamp="$venv/.installed-$hash${extras:+-$extras}"

installed() {
  # Whether an install of this pyproject.toml had every extra asked for: its stamp is .installed-HASH or
  # .installed-HASH-E1,E2,... (an install with more extras also satisfies a run that needs fewer).
  local found had wanted
  for found in "$venv/.installed-$hash" "$venv/.installed-$hash"-*; do
    [ -f "$found" ] || continue
    had=",${found#"$venv/.installed-$hash"},"  # ",," or ",-lab,test,"
    had=${had/#,-/,}
    for wanted in ${extras//,/ }; do
      [[ $had == *",$wanted,"* ]] || continue 2
    done
    return 0
  done
  return 1
}

if ! installed; then
  echo "swarmproxy: installing Python dependencies into .venv (log: .venv/install.log)" >&2
  if ! { "$venv/bin/python" -m pip install -q --upgrade pip &&
         "$venv/bin/python" -m pip install -q -e "$root${extras:+[$extras]}"; } >"$venv/install.log" 2>&1; then
    tail -n 30 "$venv/install.log" >&2
    echo "swarmproxy: installing the Python dependencies failed; the whole log is .venv/install.log" >&2
    exit 1
  fi
  rm -f "$venv"/.installed-*
  touch "$stamp"
fi
export PATH="$venv/bin:$PATH"
