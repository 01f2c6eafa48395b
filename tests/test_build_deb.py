"""The Debian package (scripts/build-deb.sh): built from this tree, installed with dpkg into a root that is this
Debian 12 machine's own seen through an overlay (a chroot in a private mount namespace: every change lands in a
scratch directory, the machine is untouched), run there, and purged leaving nothing but dpkg's records.

Needs root, dpkg, unshare and overlayfs; skipped, saying why, elsewhere. Nothing leaves the machine: the package is
built from .venv with no package index, and the proxy it runs listens on loopback, off the public network.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.e2e

# Run inside the chroot by Debian's own Python, after `dpkg -i`: the installed command starts a proxy, which answers.
INSIDE = textwrap.dedent("""\
    import json, subprocess, sys, urllib.request
    sys.path.insert(0, "/usr/lib/swarmproxy")
    import aiohttp, aioquic, cryptography, kademlia, libtorrent, redis, uvloop  # the carried wheels load
    version = subprocess.run(["swarmproxy", "--version"], capture_output=True, text=True, check=True).stdout
    proxy = subprocess.Popen(["swarmproxy", "run", "--listen", "127.0.0.1:0", "--ready-file", "/tmp/ready.json",
                              "--dht-listen", "127.0.0.1:0", "--peer-listen", "127.0.0.1:0", "--no-lan-discovery",
                              "--private-network", "--data-dir", "/tmp/data"], stderr=subprocess.PIPE)
    try:
        import os, time
        deadline = time.monotonic() + 60
        while not os.path.exists("/tmp/ready.json"):
            assert time.monotonic() < deadline, "the proxy never got ready"
            try:
                proxy.wait(0.05)  # polls for the ready file, or the process ending first
                sys.exit("the proxy exited: " + proxy.stderr.read().decode(errors="replace"))
            except subprocess.TimeoutExpired:
                pass
        address = json.load(open("/tmp/ready.json"))["proxy"]
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        status = json.load(opener.open(f"http://{address}/_swarm/status", timeout=10))
    finally:
        proxy.terminate()
        proxy.wait(30)
    print(json.dumps({"version": version.strip(), "network": status["network"]}))
""")

ALLOWED_LEFT = ("var/lib/dpkg/", "var/log/", "var/cache/debconf/", "var/cache/ldconfig/", "dev/", "root/", "tmp/")


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "installing a .deb into an overlay root needs root"
    for tool in ("dpkg", "dpkg-deb", "unshare", "chroot", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not pathlib.Path("/usr/bin/python3").exists():
        return "the package runs Debian's /usr/bin/python3, which is missing"
    probe = subprocess.run(["unshare", "--mount", "--fork", "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        return f"no private mount namespace here: {probe.stderr.decode(errors='replace').strip()}"
    return None


@pytest.fixture(scope="module")
def deb(tmp_path_factory) -> pathlib.Path:
    why = _missing()
    if why:
        pytest.skip(why)
    work = tmp_path_factory.mktemp("deb")
    env = {**os.environ, "SWARMPROXY_DEB_OUT": str(work / "out"), "SWARMPROXY_DEB_WORK": str(work / "work"),
           "SWARMPROXY_DEB_COMPRESSION": "gzip", "PIP_NO_INDEX": "1"}
    done = subprocess.run(["bash", str(ROOT / "scripts/build-deb.sh")], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    path = pathlib.Path(done.stdout.strip().splitlines()[-1])
    assert path.parent == work / "out" and path.name.startswith("swarmproxy_")
    return path


def test_the_package_says_what_it_is_and_holds_the_unit_off_the_public_network(deb, tmp_path):
    fields = subprocess.run(["dpkg-deb", "--field", str(deb)], capture_output=True, text=True, check=True).stdout
    assert "Package: swarmproxy" in fields and "Depends: python3 (>= 3.11), python3 (<< 3.12)" in fields
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path)], check=True)
    unit = (tmp_path / "usr/lib/systemd/user/swarmproxy.service").read_text()
    assert "ExecStart=/usr/bin/swarmproxy run --private-network" in unit
    assert list((tmp_path / "usr/share/swarmproxy/extension").glob("swarmproxy-chromium-*.zip"))
    assert list((tmp_path / "usr/share/swarmproxy/extension").glob("swarmproxy-firefox-*.xpi"))
    assert not list(tmp_path.rglob("__pycache__")) and not list(tmp_path.rglob("*.pyc"))


def test_it_installs_runs_and_purges_cleanly_in_an_overlay_of_this_machine(deb, tmp_path):
    upper, scratch, merged = tmp_path / "upper", tmp_path / "work", tmp_path / "merged"
    for directory in (upper, scratch, merged):
        directory.mkdir()
    shutil.copy(deb, tmp_path / "swarmproxy.deb")
    (tmp_path / "inside.py").write_text(INSIDE)
    script = f"""set -e
mount -t overlay overlay -o lowerdir=/,upperdir={upper},workdir={scratch} {merged}
mount --bind /proc {merged}/proc
mount --bind /dev {merged}/dev
mount -t tmpfs tmpfs {merged}/tmp
cp {tmp_path}/swarmproxy.deb {tmp_path}/inside.py {merged}/tmp/
chroot {merged} /bin/sh -c '
  set -e
  export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
  dpkg -i /tmp/swarmproxy.deb >/tmp/dpkg.log 2>&1 || {{ cat /tmp/dpkg.log >&2; exit 1; }}
  test -d /usr/lib/swarmproxy/proxy/__pycache__   # the postinst compiled it
  /usr/bin/python3 /tmp/inside.py > /tmp/result.json
  cat /tmp/result.json
  if command -v systemd-analyze >/dev/null; then
    mkdir -p -m 700 /tmp/runtime
    XDG_RUNTIME_DIR=/tmp/runtime systemd-analyze --user verify /usr/lib/systemd/user/swarmproxy.service
  fi
  dpkg --purge swarmproxy >/tmp/dpkg.log 2>&1 || {{ cat /tmp/dpkg.log >&2; exit 1; }}
  test ! -e /usr/bin/swarmproxy && test ! -e /usr/lib/swarmproxy
'
"""
    done = subprocess.run(["unshare", "--mount", "--fork", "sh", "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.strip() == "", done.stderr  # systemd-analyze found nothing to remark on the unit
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["version"].startswith("swarmproxy ")
    assert result["network"]["mainline"] is False
    left = sorted(str(p.relative_to(upper)) for p in upper.rglob("*") if not p.is_dir())
    assert [path for path in left if not path.startswith(ALLOWED_LEFT)] == [], left


@pytest.mark.skipif(shutil.which("lintian") is None,
                    reason="lintian is not installed (bash scripts/build-deb.sh --lint installs it and runs it)")
def test_lintian_finds_no_error_or_warning_that_is_not_explained(deb):
    done = subprocess.run(["lintian", str(deb)], capture_output=True, text=True, timeout=300)
    remarks = [line for line in done.stdout.splitlines() if line.startswith(("E:", "W:"))]
    assert remarks == [], done.stdout  # each kept remark is an override with its reason (scripts/deb_payload.py)
