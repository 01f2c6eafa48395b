"""A non-editable install of this tree works: `pipx install .` / `pip install --user .` (README, "Install") build the
wheel and put `swarmproxy` on PATH. Here the wheel is built and installed with no network (no build isolation, no
package index: the dependencies come from the test environment through a .pth file), into a fresh venv, and its
`swarmproxy` runs from a directory outside the tree, so nothing is imported from the checkout.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("addresses", "proxy", "dht", "swarm", "server_plugin", "cluster", "bittorrent", "bench")

pytestmark = pytest.mark.e2e


def _run(argv: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, **kwargs)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> pathlib.Path:
    """A fresh venv with this tree's wheel installed; returns its bin directory."""
    work = tmp_path_factory.mktemp("install")
    # A copy of the tree: setuptools writes build/ and *.egg-info beside the sources, and the checkout stays clean.
    source = work / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", "results"))
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                 str(work / "wheels"), str(source)], env=env, cwd=work)
    assert done.returncode == 0, done.stderr
    venv = work / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)]).returncode == 0
    python = venv / "bin" / "python"
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    # the dependencies: the test environment's, found after the venv's own site-packages
    pathlib.Path(purelib, "test-env-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    wheel = next((work / "wheels").glob("swarmproxy-*.whl"))
    done = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
                env=env, cwd=work)
    assert done.returncode == 0, done.stderr
    return venv / "bin"


def test_the_wheel_holds_every_package_and_no_lab_results(installed):
    wheel = next(installed.parent.parent.glob("wheels/swarmproxy-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for package in PACKAGES:
        assert f"{package}/__init__.py" in names, package
    assert not [name for name in names if name.startswith(("tests/", "bench/results/"))]
    # the status page's files, which the proxy serves from the installed package (/_swarm/: proxy.status_page)
    from proxy.status_page import FILES

    assert {f"proxy/ui/{name}" for name in FILES} <= set(names)


def test_the_installed_proxy_serves_its_status_page(installed, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # (run outside the tree: the installed package's files, read as the proxy reads them)
    script = "from proxy.status_page import FILES, ui_file; print(sum(len(ui_file(name)) for name in FILES))"
    done = _run([str(installed / "python"), "-c", script], env=env, cwd=tmp_path)
    assert done.returncode == 0 and int(done.stdout) > 1000, done.stderr


def test_the_installed_command_runs_outside_the_tree(installed, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{installed}{os.pathsep}{env.get('PATH', '')}"
    done = _run(["swarmproxy", "--version"], env=env, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("swarmproxy "), done.stderr
    where = _run([str(installed / "python"), "-c", "import proxy; print(proxy.__file__)"], env=env, cwd=tmp_path)
    assert str(ROOT) not in where.stdout and "site-packages" in where.stdout
    # the unit `service install` would write runs the installed command, not the checkout's
    done = _run(["swarmproxy", "service", "show"], env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"ExecStart={installed / 'swarmproxy'} run --private-network" in done.stdout
    # and the commands other packages declare (entry points) are there: the lab, manifest, cluster
    done = _run(["swarmproxy", "--help"], env=env, cwd=tmp_path)
    assert all(name in done.stdout for name in ("lab", "manifest", "cluster", "service")), done.stdout
