"""`swarmproxy service install|remove|show` (proxy/service_command.py): the unit it writes, how it enables and undoes
it with and without a systemd user manager, and that the unit's command line starts a proxy.

These machines do not run systemd as PID 1, so `systemctl` is a stand-in script on PATH that behaves as the real one
does there (no bus: `daemon-reload` and `--now` fail, `enable`/`disable` still make and remove the link) or as it
does under a user manager; `systemd-analyze --user verify` checks the unit itself where it is installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import urllib.request

import pytest

from bittorrent.settings import PRIVATE_NETWORK_ENV
from proxy import service_command as svc
from proxy.cli import build_parser
from proxy.errors import ConfigError

ROOT = pathlib.Path(__file__).resolve().parents[2]

# A stand-in for systemctl: logs its arguments; with FAKE_MANAGER=1 every command works, else (no user bus) only
# enable/disable do, on the links as the real one makes them offline.
FAKE_SYSTEMCTL = r"""#!/bin/sh
echo "$*" >> "$FAKE_LOG"
shift  # --user
unit_dir="$XDG_CONFIG_HOME/systemd/user"
case "$1" in
  enable) mkdir -p "$unit_dir/default.target.wants"; ln -sf "$unit_dir/$2" "$unit_dir/default.target.wants/$2"
          [ "$FAKE_MANAGER" = 1 ] || [ "$2" != --now ] || { echo "Failed to connect to bus" >&2; exit 1; }
          exit 0;;
  disable) if [ "$2" = --now ] && [ "$FAKE_MANAGER" != 1 ]; then
             echo "Failed to connect to bus: No medium found" >&2; exit 1; fi
           rm -f "$unit_dir/default.target.wants/${3:-$2}"; exit 0;;
esac
[ "$FAKE_MANAGER" = 1 ] && exit 0
echo "Failed to connect to bus: No medium found" >&2
exit 1
"""


@pytest.mark.parametrize("argument, written", [
    ("--listen", "--listen"),
    ("127.0.0.1:8080", "127.0.0.1:8080"),
    ("/a b/c", '"/a b/c"'),
    ("100%", "100%%"),  # a specifier otherwise
    ("$HOME", "$$HOME"),  # a variable otherwise
    ('say "hi"', '"say \\"hi\\""'),
    ("back\\slash", '"back\\\\slash"'),
    ("semi;colon", '"semi;colon"'),
    ("", '""'),
])
def test_quote(argument, written):
    assert svc.quote(argument) == written
    # and the shell-like split systemd does gives the argument back (specifiers and variables undone)
    assert [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(written)] == [argument]


@pytest.mark.parametrize("options, public, expected", [
    ([], False, ["--private-network"]),
    ([], True, []),
    (["--listen", "127.0.0.1:9000"], False, ["--listen", "127.0.0.1:9000", "--private-network"]),
    (["--private-network"], False, ["--private-network"]),  # never twice
    (["--private-network"], True, ["--private-network"]),  # the user's own flag stays
])
def test_run_arguments_stay_private_unless_asked(options, public, expected):
    assert svc.run_arguments(options, public=public) == expected


@pytest.mark.parametrize("argv, own, run_options", [
    (["service", "install"], ["service", "install"], []),
    (["service", "install", "--", "--listen", "1:2"], ["service", "install"], ["--listen", "1:2"]),
    (["service", "install", "--public-network", "--", "--x", "--", "y"], ["service", "install", "--public-network"],
     ["--x", "--", "y"]),
])
def test_split_at_the_first_double_dash(argv, own, run_options):
    assert svc.split(argv) == (own, run_options)


def test_unit_dir_follows_xdg_config_home(tmp_path):
    assert svc.unit_dir({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "systemd" / "user"
    assert svc.unit_dir({"XDG_CONFIG_HOME": ""}) == pathlib.Path("~/.config/systemd/user").expanduser()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verifies_the_unit_without_a_remark(tmp_path):
    unit = tmp_path / "swarmproxy.service"
    unit.write_text(svc.unit_text(svc.own_command(), svc.run_arguments(["--data-dir", str(tmp_path / "a b%")],
                                                                        public=False)))
    runtime = tmp_path / "runtime"  # --user needs a runtime dir, which no login made here
    runtime.mkdir(mode=0o700)
    done = subprocess.run(["systemd-analyze", "--user", "verify", str(unit)], capture_output=True, text=True,
                          env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr  # a misspelt key or value is only a warning: none here


@pytest.fixture
def fake_system(tmp_path, monkeypatch):
    """XDG_CONFIG_HOME in tmp_path and the stand-in systemctl first on PATH; returns (unit dir, log of calls)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "systemctl"
    fake.write_text(FAKE_SYSTEMCTL)
    fake.chmod(0o755)
    log = tmp_path / "systemctl.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("FAKE_MANAGER", "0")
    return tmp_path / "config" / "systemd" / "user", log


def _calls(log: pathlib.Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_install_without_a_user_manager_enables_for_the_next_login_and_remove_undoes_it(fake_system):
    units, log = fake_system
    said: list[str] = []
    assert svc.install(["--listen", "127.0.0.1:9000"], public=False, parser=build_parser(), say=said.append) == 0
    unit = units / "swarmproxy.service"
    link = units / "default.target.wants" / "swarmproxy.service"
    assert "--listen 127.0.0.1:9000 --private-network" in unit.read_text()
    assert link.is_symlink() and link.resolve() == unit
    assert _calls(log) == ["--user daemon-reload", "--user enable swarmproxy.service"]  # nothing to start
    assert any("next login" in line for line in said)
    said.clear()
    assert svc.remove(say=said.append) == 0
    assert not unit.exists() and not link.is_symlink() and not link.parent.exists()
    assert _calls(log)[2:] == ["--user disable --now swarmproxy.service", "--user disable swarmproxy.service"]
    assert any("nothing was stopped" in line for line in said)


def test_install_under_a_user_manager_starts_it_and_a_second_install_restarts_the_new_command(fake_system,
                                                                                              monkeypatch):
    units, log = fake_system
    monkeypatch.setenv("FAKE_MANAGER", "1")
    said: list[str] = []
    svc.install([], parser=build_parser(), public=False, say=said.append)
    assert _calls(log) == ["--user daemon-reload", "--user enable swarmproxy.service",
                           "--user restart swarmproxy.service"]
    assert any("enabled and started" in line for line in said)
    said.clear()
    svc.install([], parser=build_parser(), public=True, say=said.append)
    assert said[0].startswith("replaced ")
    assert "--private-network" not in (units / "swarmproxy.service").read_text()
    assert _calls(log)[-1] == "--user restart swarmproxy.service"
    svc.remove(say=said.append)
    assert _calls(log)[-2:] == ["--user disable --now swarmproxy.service", "--user daemon-reload"]
    assert not (units / "swarmproxy.service").exists()


def test_install_without_systemctl_makes_the_link_itself(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setattr(svc.shutil, "which", lambda name: None)
    said: list[str] = []
    svc.install([], parser=build_parser(), public=False, say=said.append)
    link = tmp_path / "config" / "systemd" / "user" / "default.target.wants" / "swarmproxy.service"
    assert link.is_symlink() and link.resolve().name == "swarmproxy.service"
    assert any("systemctl is not installed" in line for line in said)
    svc.remove(say=said.append)
    assert not link.is_symlink() and not (tmp_path / "config" / "systemd" / "user" / "swarmproxy.service").exists()


@pytest.mark.parametrize("options, message", [
    (["--bogus"], "not a valid command line"),
    (["--listen", "nonsense"], "not HOST:PORT"),
    (["--config", "/no/such/file.toml"], "does not exist"),
])
def test_bad_run_options_write_nothing(fake_system, options, message):
    units, log = fake_system
    with pytest.raises(ConfigError, match=message):
        svc.install(options, parser=build_parser(), public=False, say=lambda line: None)
    assert not units.exists() and _calls(log) == []


def test_remove_with_nothing_installed_says_so(fake_system):
    said: list[str] = []
    assert svc.remove(say=said.append) == 0
    assert "nothing to do" in said[0]


def _swarmproxy(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proxy.cli", *argv], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=60)


@pytest.mark.e2e
async def test_the_installed_units_command_line_runs_a_private_proxy(fake_system, tmp_path):
    units, _ = fake_system
    ready = tmp_path / "ready.json"
    # the unit's own --private-network is what is tested; the suite's guard stays on all the same
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARMPROXY_") or k == PRIVATE_NETWORK_ENV}
    done = _swarmproxy("service", "install", "--", "--listen", "127.0.0.1:0", "--ready-file", str(ready),
                       "--dht-listen", "127.0.0.1:0", "--peer-listen", "127.0.0.1:0", "--no-lan-discovery",
                       "--data-dir", str(tmp_path / "data dir"), env=env)
    assert done.returncode == 0, done.stderr
    assert "next login" in done.stderr
    line = next(x for x in (units / "swarmproxy.service").read_text().splitlines() if x.startswith("ExecStart="))
    argv = [word.replace("%%", "%").replace("$$", "$") for word in shlex.split(line.removeprefix("ExecStart="))]
    assert pathlib.Path(argv[0]).is_absolute()
    process = await asyncio.create_subprocess_exec(*argv, env={**env, "XDG_DATA_HOME": str(tmp_path / "xdg")},
                                                   stdout=asyncio.subprocess.DEVNULL,
                                                   stderr=asyncio.subprocess.PIPE, cwd=tmp_path)
    try:
        async with asyncio.timeout(30):
            while not ready.exists():
                assert process.returncode is None, await process.stderr.read()  # type: ignore[union-attr]
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(process.wait(), 0.05)
        address = json.loads(ready.read_text())["proxy"]
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        status = await asyncio.to_thread(lambda: json.load(opener.open(f"http://{address}/_swarm/status", timeout=10)))
        assert status["network"]["mainline"] is False and status["network"]["public"] is False
        assert "private-network" in status["network"]["why_off"]
    finally:
        if process.returncode is None:
            process.terminate()
            await process.wait()
    done = _swarmproxy("service", "remove", env=env)
    assert done.returncode == 0, done.stderr
    assert not (units / "swarmproxy.service").exists()


def test_the_cli_refuses_options_before_the_double_dash_and_remove_with_options(fake_system):
    env = dict(os.environ)
    done = _swarmproxy("service", "install", "--listen", "127.0.0.1:1", env=env)
    assert done.returncode == 2 and "unrecognized arguments: --listen" in done.stderr
    done = _swarmproxy("service", "remove", "--", "--listen", "127.0.0.1:1", env=env)
    assert done.returncode == 2 and "takes no options" in done.stderr
