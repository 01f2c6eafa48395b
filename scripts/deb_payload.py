"""Lay out the Debian package's tree (scripts/build-deb.sh runs this with the .venv's Python).

    python scripts/deb_payload.py ROOT_DIR WORK_DIR EXTENSION_DIR

What goes where:

* /usr/lib/swarmproxy/: swarmproxy's own packages (its wheel, built from a copy of this tree) and every Python
  distribution it depends on at run time, copied file by file (their RECORD) from the environment this runs in: the
  versions the tests ran with. Debian 12 packages few of them (no aioquic, kademlia, libtorrent 2.x or
  prometheus-client at our versions), and mixing Debian's with PyPI's would make a combination nobody tested. Python
  bytecode is not shipped: the postinst compiles it, the prerm removes it, so removal leaves nothing behind.
* /usr/bin/swarmproxy: runs Debian's /usr/bin/python3 (3.11: the wheels carried are for CPython 3.11) on that
  directory, isolated from the user's site-packages and PYTHONPATH.
* /usr/lib/systemd/user/swarmproxy.service: a user unit, not enabled: `systemctl --user enable --now swarmproxy`
  starts it. It runs with --private-network: an installed service never joins the public Mainline DHT or asks the
  router for a port mapping until its user says so (a drop-in, or `swarmproxy service install --public-network`).
* /usr/share/swarmproxy/extension/: the browser extension's Chromium and Firefox builds (scripts/build-extension.sh).
* /usr/share/doc/swarmproxy/: copyright, changelog, README; lintian's overrides, each with its reason.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib
import importlib.metadata as metadata
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

try:
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
except ImportError:  # a .venv of run.sh's has no packaging of its own; pip carries one
    from pip._vendor.packaging.markers import default_environment
    from pip._vendor.packaging.requirements import Requirement

TREE = pathlib.Path(__file__).resolve().parents[1]
NAME = "swarmproxy"
LIB = pathlib.Path("usr/lib/swarmproxy")
PYTHON = "/usr/bin/python3"
PYTHON_DEPENDS = "python3 (>= 3.11), python3 (<< 3.12)"  # the carried wheels' ABI: CPython 3.11
SKIPPED = ("__pycache__", "*.pyc")

LAUNCHER = f"""#!{PYTHON} -I
# swarmproxy, as installed by its Debian package: the code and its Python dependencies are in /{LIB}.
import sys

sys.path.insert(0, "/{LIB}")
from proxy.cli import main

sys.exit(main())
"""

UNIT = """[Unit]
Description=swarmproxy: a local HTTP proxy that finishes slow downloads from verified peer blocks
Documentation=file:///usr/share/doc/swarmproxy/README.md.gz
After=network-online.target
Wants=network-online.target

[Service]
# Off the public network until you say so: add a drop-in (systemctl --user edit swarmproxy) whose ExecStart=
# leaves --private-network out, or run 'swarmproxy service install --public-network' instead of this unit.
Type=exec
ExecStart=/usr/bin/swarmproxy run --private-network
Restart=on-failure
RestartSec=5s
NoNewPrivileges=yes

[Install]
WantedBy=default.target
"""

POSTINST = f"""#!/bin/sh
set -e
if [ "$1" = configure ]; then
    python3 -m compileall -q -f /{LIB} >/dev/null || true
fi
"""

PRERM = f"""#!/bin/sh
set -e
# the bytecode the postinst made: dpkg removes only the files it installed
find /{LIB} -depth -type d -name __pycache__ -exec rm -rf {{}} + 2>/dev/null || true
"""

# Every warning lintian makes on this package that we keep, with why (docs/packaging.md has the list).
OVERRIDES = {
    "no-manual-page": "swarmproxy --help and each command's --help are its manual [usr/bin/swarmproxy]",
    "unusual-interpreter": "prometheus_client's modules begin with a #!python line; they are imported, never run",
    "initial-upload-closes-no-bugs": "built from the repository, never uploaded to Debian: there is no ITP bug",
}


def target_environment() -> dict[str, str]:
    """The marker environment of the Python the package runs on, Debian's /usr/bin/python3 (3.11.2 on Debian 12),
    not the one this runs on: redis needs async-timeout below 3.11.3 only."""
    probe = "import platform; print(platform.python_version())"
    full = subprocess.run([PYTHON, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    return {**default_environment(), "python_full_version": full, "implementation_version": full,
            "python_version": ".".join(full.split(".")[:2])}


def closure(root: str, environment: dict[str, str]) -> tuple[list[metadata.Distribution], list[str]]:
    """`root`'s run-time dependencies on `environment`, transitively, as installed here (extras only where asked
    for); and the requirements of them that are not installed here."""
    seen: dict[str, metadata.Distribution] = {}
    missing: list[str] = []
    todo: list[tuple[str, frozenset[str]]] = [(root, frozenset())]
    while todo:
        name, extras = todo.pop()
        dist = metadata.distribution(name)
        key = dist.metadata["Name"].lower().replace("_", "-")
        first = key not in seen
        seen[key] = dist
        for text in dist.requires or []:
            requirement = Requirement(text)
            marker = requirement.marker
            wanted = marker is None or any(marker.evaluate({**environment, "extra": extra})
                                           for extra in (extras or {""}))
            if not wanted or not (first or requirement.extras):
                continue
            try:
                metadata.distribution(requirement.name)
            except metadata.PackageNotFoundError:
                missing.append(str(requirement).split(";")[0])
                continue
            todo.append((requirement.name, frozenset(requirement.extras)))
    seen.pop(root, None)  # our own code comes from the wheel, not from the (editable) install
    return sorted(seen.values(), key=lambda d: d.metadata["Name"].lower()), sorted(set(missing))


def dependencies() -> list[metadata.Distribution]:
    """The distributions to carry: `closure` on Debian's Python, after installing here what it needs that the Python
    this runs on does not (from the package index; with PIP_NO_INDEX set, an error naming them)."""
    environment = target_environment()
    found, missing = closure(NAME, environment)
    if missing:
        print(f"swarmproxy: Debian's python3 {environment['python_full_version']} also needs {', '.join(missing)}: "
              "installing into this environment to carry it", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *missing], check=True)
        importlib.invalidate_caches()
        found, missing = closure(NAME, environment)
        assert not missing, missing
    return found


def copy_distribution(dist: metadata.Distribution, target: pathlib.Path) -> int:
    """Copy `dist`'s files that live in site-packages (not its scripts, nor bytecode) into `target`."""
    copied = 0
    for file in dist.files or []:
        if file.parts[0] == ".." or "__pycache__" in file.parts or file.suffix == ".pyc":
            continue
        source = pathlib.Path(str(file.locate()))
        if not source.is_file():
            continue
        destination = target / file
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)
        copied += 1
    return copied


def own_wheel(work: pathlib.Path) -> pathlib.Path:
    """Build swarmproxy's wheel from a copy of the tree (setuptools writes build/ beside its sources), offline when
    this environment has the build backend (the test extra), else with pip's isolated build."""
    source = work / "source"
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(TREE, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", "results"))
    try:
        offline = int(metadata.version("setuptools").split(".")[0]) >= 77
    except metadata.PackageNotFoundError:
        offline = False
    flags = ["--no-build-isolation", "--no-index"] if offline else []
    wheels = work / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", *flags, "-w", str(wheels),
                    str(source)], check=True)
    return next(wheels.glob(f"{NAME}-*.whl"))


def strip(lib: pathlib.Path) -> None:
    """Strip the carried extension modules' symbols, as dh_strip does for a Debian package (libtorrent's 25 MB
    shrinks to a few); where binutils is missing they are shipped as PyPI built them (lintian then says so)."""
    if shutil.which("strip") is None:
        print("swarmproxy: binutils' strip is missing: the extension modules keep their symbols", file=sys.stderr)
        return
    objects = [str(p) for p in lib.rglob("*") if p.is_file() and (p.suffix == ".so" or ".so." in p.name)]
    if objects:
        subprocess.run(["strip", "--strip-unneeded", "--remove-section=.comment", "--remove-section=.note",
                        *objects], check=True)


def _write(path: pathlib.Path, text: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, str):
        text = text.encode()
    path.write_bytes(text)
    path.chmod(mode)


def _gzip(path: pathlib.Path, data: bytes) -> None:
    _write(path, gzip.compress(data, compresslevel=9, mtime=0))


def architecture() -> str:
    return subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()


def control(version: str, installed_kib: int) -> str:
    return textwrap.dedent(f"""\
        Package: {NAME}
        Version: {version}
        Architecture: {architecture()}
        Maintainer: swarmproxy developers <swarmproxy@users.noreply.github.com>
        Installed-Size: {installed_kib}
        Depends: {PYTHON_DEPENDS}, libc6, ca-certificates
        Section: net
        Priority: optional
        Homepage: https://github.com/swarmproxy/swarmproxy
        Description: HTTP forward proxy that finishes slow downloads from verified peer blocks
         Every GET starts at the origin. When the origin is slow, the proxy keeps what
         it has and fetches the rest of the same file as hash-verified blocks from
         peers that fetched it before, found through a DHT, and serves the blocks it
         holds to others. Clients see one ordinary response. Point a browser or curl
         at 127.0.0.1:8080.
         .
         The package carries the Python libraries it needs in /usr/lib/swarmproxy.
         A systemd user unit is installed but not enabled, and stays off the public
         network.
        """)


def build(root: pathlib.Path, work: pathlib.Path, extension: pathlib.Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
    lib = root / LIB
    wheel = own_wheel(work)
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-compile", "-q",
                    "--target", str(lib), str(wheel)], check=True)
    shutil.rmtree(lib / "bin", ignore_errors=True)  # its console script: /usr/bin/swarmproxy is ours
    for dist in dependencies():
        copy_distribution(dist, lib)
    for cache in list(lib.rglob("__pycache__")):
        shutil.rmtree(cache)
    strip(lib)
    version = wheel.name.split("-")[1]
    _write(root / "usr/bin/swarmproxy", LAUNCHER, 0o755)
    _write(root / "usr/lib/systemd/user/swarmproxy.service", UNIT)
    for archive in sorted(extension.glob("swarmproxy-*")):
        _write(root / "usr/share/swarmproxy/extension" / archive.name, archive.read_bytes())
    doc = root / "usr/share/doc" / NAME
    _write(doc / "copyright", COPYRIGHT)
    _gzip(doc / "changelog.Debian.gz", CHANGELOG.format(version=version).encode())
    _gzip(doc / "README.md.gz", (TREE / "README.md").read_bytes())
    _write(root / "usr/share/lintian/overrides" / NAME,
           "".join(f"# {why}\n{NAME}: {tag}\n" for tag, why in OVERRIDES.items()))
    for path in root.rglob("*"):  # what dpkg installs: readable by all, written by root only
        if path.is_dir():
            path.chmod(0o755)
        elif path.is_file() and not path.is_symlink():
            runs = os.access(path, os.X_OK) and path.suffix not in (".py", ".so") and ".so." not in path.name
            path.chmod(0o755 if runs else 0o644)  # shared objects are mapped, not run
    files = sorted(p for p in root.rglob("*") if p.is_file())
    debian = root / "DEBIAN"
    _write(debian / "md5sums", "".join(f"{hashlib.md5(p.read_bytes()).hexdigest()}  {p.relative_to(root)}\n"
                                       for p in files))
    size = sum(p.stat().st_size for p in files) // 1024
    _write(debian / "control", control(f"{version}-1", size))
    _write(debian / "postinst", POSTINST, 0o755)
    _write(debian / "prerm", PRERM, 0o755)


COPYRIGHT = """Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: swarmproxy
Source: https://github.com/swarmproxy/swarmproxy

Files: *
Copyright: 2026 swarmproxy developers
License: Expat

Files: usr/lib/swarmproxy/*
Copyright: the authors of each Python distribution carried there
License: various
 Each distribution's license is in its own *.dist-info directory (METADATA, and
 LICENSE files where it ships them), unchanged.

License: Expat
 Permission is hereby granted, free of charge, to any person obtaining a copy
 of this software and associated documentation files (the "Software"), to deal
 in the Software without restriction, including without limitation the rights
 to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
 copies of the Software, and to permit persons to whom the Software is
 furnished to do so, subject to the following conditions:
 .
 The above copyright notice and this permission notice shall be included in
 all copies or substantial portions of the Software.
 .
 THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
 IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
 FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
 AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
 LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
 OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN
 THE SOFTWARE.
"""

CHANGELOG = """swarmproxy ({version}-1) unstable; urgency=medium

  * Built from the repository by scripts/build-deb.sh.

 -- swarmproxy developers <swarmproxy@users.noreply.github.com>  Sun, 29 Nov 2026 00:00:00 +0000
"""


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__.split("\n\n")[1])
    build(*(pathlib.Path(arg).resolve() for arg in sys.argv[1:]))
