"""The packages exist, import, and respect DESIGN.md's dependency direction."""

import ast
import importlib
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# package -> packages of ours it must never import
FORBIDDEN = {
    "dht": {"proxy", "swarm", "server_plugin"},
    "swarm": {"proxy", "dht", "server_plugin"},
    "server_plugin": {"proxy", "dht"},
}


@pytest.mark.parametrize("name", ["proxy", "dht", "swarm", "server_plugin"])
def test_package_imports(name):
    assert importlib.import_module(name).__doc__


def _imported_roots(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_one_way(package):
    bad = []
    for path in (ROOT / package).rglob("*.py"):
        for root in _imported_roots(path):
            if root in FORBIDDEN[package]:
                bad.append(f"{path.relative_to(ROOT)} imports {root}")
    assert not bad, bad
