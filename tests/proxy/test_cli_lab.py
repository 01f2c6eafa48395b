"""The product stands without the lab: proxy/, swarm/, dht/ and server_plugin/ never import bench, and
`swarmproxy lab` reaches bench through the "swarmproxy.commands" entry point (listed in --help, its own --help,
one clear line when the lab extra is missing or a command cannot load)."""

from __future__ import annotations

import ast
import subprocess
import sys
from importlib import metadata

import pytest

from proxy import cli

from .conftest import ROOT

PRODUCT = ("proxy", "swarm", "dht", "server_plugin")


def _imported_roots(path):
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]


@pytest.mark.parametrize("package", PRODUCT)
def test_the_product_never_imports_the_lab(package):
    bad = [str(path.relative_to(ROOT)) for path in (ROOT / package).rglob("*.py")
           if "bench" in set(_imported_roots(path))]
    assert not bad, bad


def test_running_the_cli_and_the_demo_loads_no_lab_module():
    code = ("import sys; from proxy import cli, demo; from proxy.demo import local_swarm, slow_origin; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'bench'))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_lab_is_an_entry_point_of_the_commands_group():
    entry = cli.plugin_commands()["lab"]
    assert entry.group == cli.COMMAND_GROUP and entry.value == "bench.lab.cli:main"


def test_help_lists_lab_with_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "lab rerun the thesis experiments here: direct vs swarmproxy vs libtorrent" in out


def test_lab_help_is_the_labs_own(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["lab", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: swarmproxy lab") and "largefile" in out


def test_lab_without_its_extra_says_what_to_install():
    # As where `bash scripts/run.sh` installed the proxy alone: neither module of the lab extra imports.
    code = ("import sys; sys.modules['libtorrent'] = sys.modules['matplotlib'] = None; "
            "from proxy.cli import main; sys.exit(main(['lab', 'flashcrowd', '--quick', '--out', 'unused']))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stdout == ""  # nothing ran
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "needs the lab extra" in lines[0] and "missing here: libtorrent, matplotlib" in lines[0]
    assert "pip install -e" in lines[0] and "[lab]" in lines[0] and "scripts/lab.sh" in lines[0]
    assert not (ROOT / "unused").exists()


def test_a_command_that_cannot_load_is_one_line(monkeypatch, capsys):
    broken = metadata.EntryPoint(name="broken", value="no_such_module_here:main", group=cli.COMMAND_GROUP)
    monkeypatch.setattr(cli, "plugin_commands", lambda: {"broken": broken})
    assert cli.main(["broken", "--anything"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the broken command (no_such_module_here:main) cannot be loaded" in err
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "broken" in capsys.readouterr().out  # still listed, marked unavailable


def test_a_command_cannot_take_a_core_name(monkeypatch):
    fake = metadata.EntryPoint(name="run", value="bench.lab.cli:main", group=cli.COMMAND_GROUP)
    monkeypatch.setattr(metadata, "entry_points", lambda group: [fake] if group == cli.COMMAND_GROUP else [])
    assert cli.plugin_commands() == {}


def test_the_core_commands_are_the_parsers_own(monkeypatch):
    monkeypatch.setattr(cli, "plugin_commands", dict)  # no plugins: what is left is the product's
    commands = next(a for a in cli.build_parser()._actions if a.dest == "command")
    assert set(commands.choices) == set(cli.CORE_COMMANDS)
