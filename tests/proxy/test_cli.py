"""The command line: --help explains every option with its default; bad settings are one clear line."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from bittorrent.settings import PRIVATE_NETWORK_ENV
from proxy import cli
from proxy.config import OPTIONS

from .rawhttp import request


def test_run_help_lists_every_option_with_default(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for option in OPTIONS:
        assert f"--{option.name}" in text
    assert text.count("(default:") >= len(OPTIONS)


@pytest.mark.parametrize("command", [[], ["status"]])
def test_help_for_each_command(capsys, command):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*command, "--help"])
    assert exit_info.value.code == 0
    assert "usage: swarmproxy" in capsys.readouterr().out


@pytest.mark.parametrize("argv,needle", [
    (["run", "--listen", "0.0.0.0:8080"], "--allow-remote"),
    (["run", "--listen", "x:y"], "not HOST:PORT"),
    (["run", "--connect-ports", "https"], "not a port number"),
    (["run", "--block-size", "48Ki"], "not auto or a power of two"),
    (["run", "--block-size", "16M"], "--block-size: block size '16M' is not auto or a power of two from 16Ki to 4Mi"),
    (["run", "--store-size", "lots"], "--store-size: 'lots' is not a size"),
    (["run", "--config", "/nonexistent/swarmproxy.toml"], "does not exist"),
])
def test_bad_settings_exit_2_with_one_line(argv, needle, tmp_path):
    result = subprocess.run([sys.executable, "-m", "proxy.cli", *argv], capture_output=True, text=True,
                            env={"XDG_DATA_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", PRIVATE_NETWORK_ENV: "1"},
                            timeout=60)
    assert result.returncode == 2
    assert needle in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("argv, listed", [
    ([], ["run ", "status ", "get ", "ca ", "demo ", "swarm "]),
    (["swarm"], ["manifest ", "seed ", "get "]),
])
def test_a_command_given_no_subcommand_lists_them(argv, listed, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: {' '.join(['swarmproxy', *argv])} ") and "required" not in err
    assert all(f"\n    {name}" in err for name in listed), err


@pytest.mark.parametrize("argv, usage, error", [
    (["run", "--bogus"], "usage: swarmproxy run [-h] [--listen HOST:PORT]", "swarmproxy run: error: "),
    (["status", "extra"], "usage: swarmproxy status [-h]", "swarmproxy status: error: "),
    (["swarm", "manifest", "f", "--bogus"], "usage: swarmproxy swarm manifest [-h]",
     "swarmproxy swarm manifest: error: "),
    (["--bogus", "status"], "usage: swarmproxy [-h]", "swarmproxy: error: "),  # before the command: the top's
])
def test_an_unknown_argument_is_its_commands_usage_error(argv, usage, error, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage), err
    unknown = next(a for a in argv if a in ("--bogus", "extra"))
    assert err.strip().endswith(f"{error}unrecognized arguments: {unknown}"), err


def test_status_without_a_proxy_fails_clearly(unused_tcp_port, capsys):
    assert cli.main(["status", "--proxy", f"127.0.0.1:{unused_tcp_port}", "--timeout", "2"]) == 1
    assert "no proxy answers" in capsys.readouterr().err


def test_port_in_use_is_a_clear_error(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "proxy.cli", "run", "--listen", f"127.0.0.1:{port}",
                                 "--dht-listen", "off", "--peer-listen", "off"],
                                capture_output=True, text=True, timeout=60,
                                env={"XDG_DATA_HOME": str(tmp_path), PRIVATE_NETWORK_ENV: "1"})
    assert result.returncode == 1
    assert "cannot listen on" in result.stderr and "Traceback" not in result.stderr


async def test_run_logs_each_request_as_one_line_of_its_format(proxy_process, origin):
    """The access log keeps its line (`cli.LOG_FORMAT`) while `run` skips gathering what that line never shows."""
    relayed = await request(proxy_process.address, f"GET {origin.url}/bytes/10 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert relayed.status == 200
    # Answered after the first request's record was closed and its line written (one loop, in order).
    status = await request(proxy_process.address, b"GET /_swarm/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert status.status == 200
    lines = [line for line in proxy_process.log().splitlines() if " swarmproxy.access: " in line]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO swarmproxy\.access: 127\.0\.0\.1 GET "
                        rf"{re.escape(origin.url)}/bytes/10 200 10B \d+\.\d{{3}}s", lines[0]), lines
