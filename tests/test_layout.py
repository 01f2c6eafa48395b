"""The house rules of docs/ARCHITECTURE.md, as tests: imports point one way, cores do no I/O, modules stay small."""

import ast
import importlib
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PRODUCT = ("addresses", "proxy", "swarm", "dht", "server_plugin", "cluster", "bittorrent")
OURS = PRODUCT + ("bench",)
MAX_MODULE_LINES = 600

# What each part of the tree may import of ours (the longest matching prefix applies). Anything of ours that is
# not listed is forbidden: the product never imports the lab, swarm never sees the proxy or the DHT (it defines
# the discovery seam the DHT implements), the DHT imports only that seam, and the origin-side plugin needs
# only the content identity (manifest and hashing) and what an address is.
ALLOWED = {
    "addresses": (),  # at the bottom: what an address is, which network it counts in; it imports nothing of ours
    # The DHT implements the discovery seam: it imports the seam's vocabulary, nothing else of the engine.
    "dht": ("dht", "addresses", "swarm.discovery.seam"),
    "swarm": ("swarm", "addresses"),
    # Inside the engine: the content identity needs nothing else of it, and no layer below the service reaches up.
    # (`addresses`, the bottom module, for the origin's peer list: IP literals only, one spelling)
    "swarm.content": ("swarm.content", "swarm.errors", "addresses"),
    "swarm.core": ("swarm.content", "swarm.core", "swarm.net.wire", "swarm.errors", "addresses"),
    "swarm.store": ("swarm.content", "swarm.store", "swarm.net.wire", "swarm.errors"),
    # The wire carries claims (CLAIMS, on a query session): it speaks their vocabulary, a module of values.
    "swarm.net": ("swarm.content", "swarm.net", "swarm.store.interface", "swarm.trust.claims", "swarm.errors",
                  "addresses"),
    # The trust rule: which content from strangers to believe. Pure, under every Discovery and both modes.
    "swarm.trust": ("swarm.trust", "swarm.content", "swarm.errors", "addresses"),
    # The discovery seam and what runs backends together: the trust rule's vocabulary of claims, nothing above.
    "swarm.discovery": ("swarm.discovery", "swarm.trust.claims", "swarm.errors"),
    # (`addresses`: the peer list it keeps counts one entry per address, as the engine counts sources)
    "server_plugin": ("server_plugin", "swarm.content", "addresses"),
    "proxy": ("proxy", "swarm", "dht", "bittorrent", "addresses"),
    # the demo's origin runs the plugin
    "proxy.demo": ("proxy", "swarm", "dht", "bittorrent", "server_plugin", "addresses"),
    "cluster": ("cluster", "swarm", "addresses"),
    # The BitTorrent bridge: the block engine's content as torrents, through one libtorrent session; the proxy
    # wires it, and it never sees the proxy.
    "bittorrent": ("bittorrent", "swarm", "addresses"),  # the cluster mode runs the block engine over its own discovery
    "bench": OURS,
}

# Sans-I/O cores: every decision a call with `now`, so they import nothing that does I/O or reads the clock.
CORE_PACKAGES = ("swarm.core", "swarm.content", "swarm.trust")  # (the seam, `swarm.discovery.seam`, is listed below)
CORE_MODULES = (
    "swarm.net.wire", "swarm.net.decoder", "swarm.net.handshakes",
    "proxy.download.transition", "proxy.download.adaptive", "proxy.download.parking", "proxy.download.settings",
    "proxy.download.core", "proxy.download.parking_steps", "proxy.download.state", "proxy.download.actions",
    "proxy.download.discovery_rule", "proxy.download.segment_walk", "proxy.download.origin_pieces",
    "proxy.origin_head", "proxy.publish_gate",
    "proxy.url_privacy", "proxy.ranges", "proxy.timeline", "proxy.peer_rates",
    "proxy.exposure", "bittorrent.settings", "bittorrent.admission", "bittorrent.target",
    "swarm.discovery.seam", "swarm.discovery.own_claims",
    "dht.attestation", "dht.announcements", "dht.routing", "dht.records", "addresses",
    "cluster.overlay", "cluster.throttle", "cluster.division", "cluster.carriers", "cluster.records", "cluster.scope",
    "cluster.fresh", "cluster.stalls",
    "cluster.lag",
)
# ... nor touch files: the shell reads and writes them and hands the core their contents (a call of the builtin
# `open` counts too, `_opens_files`).
IO_MODULES = {"asyncio", "aiohttp", "socket", "selectors", "threading", "time", "uvloop", "aioquic", "redis",
              "os", "pathlib", "shutil", "tempfile", "glob", "io"}
PURE_USES = {("dht.wire", "socket")}  # socket.inet_pton / inet_ntop: address packing, no socket is opened


def _modules(packages=OURS):
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def _imports(name: str, path: pathlib.Path, *, typing_only: bool = True):
    """Absolute names of every module `path` (module `name`) imports, relative imports resolved; with
    `typing_only=False`, not those under `if TYPE_CHECKING:` (never imported when the program runs)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    skipped = set()
    if not typing_only:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names_base = False
            for alias in node.names:  # `from swarm.net import wire` imports swarm.net.wire
                candidate = ROOT / pathlib.Path(*f"{base}.{alias.name}".split("."))
                if candidate.with_suffix(".py").exists() or (candidate / "__init__.py").exists():
                    yield f"{base}.{alias.name}"
                else:
                    names_base = True
            if names_base:
                yield base


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _rule(name: str) -> tuple[str, ...]:
    best = max((p for p in ALLOWED if _within(name, p)), key=len)
    return ALLOWED[best]


@pytest.mark.parametrize("name", PRODUCT)
def test_package_imports(name):
    assert importlib.import_module(name).__doc__


@pytest.mark.parametrize("package", OURS)
def test_imports_point_one_way(package):
    bad = []
    for name, path in _modules((package,)):
        allowed = _rule(name)
        for imported in _imports(name, path):
            if imported.split(".")[0] in OURS and not any(_within(imported, a) for a in allowed):
                bad.append(f"{path.relative_to(ROOT)} imports {imported}")
    assert not bad, "\n".join(bad)


# Packages inside a room, each on its own floor: what they import of the room lies below them, and nothing below
# imports them back (a module above, such as the server or the configuration, may).
FLOORS = {"proxy.download": ("proxy.cli", "proxy.server", "proxy.config", "proxy.startup_log", "proxy.demo")}


@pytest.mark.parametrize("package", sorted(FLOORS))
def test_a_package_is_imported_only_from_above(package):
    room = package.rpartition(".")[0]
    below = {imported for name, path in _modules((package.replace(".", "/"),)) for imported in _imports(name, path)
             if _within(imported, room) and not _within(imported, package)}
    assert below, f"{package} imports nothing of {room}: the test would prove nothing"
    bad = [f"{path.relative_to(ROOT)} imports {imported}" for name, path in _modules((room,))
           if not _within(name, package) and not any(_within(name, above) for above in FLOORS[package])
           for imported in _imports(name, path) if _within(imported, package)]
    assert not bad, "\n".join(bad)
    assert not [m for m in below if any(_within(m, above) for above in FLOORS[package])]


def test_cores_do_no_io():
    """Nor does anything of ours they import when they run, the packages around it included (what
    `if TYPE_CHECKING:` names does not count)."""
    names = dict(_modules(PRODUCT))
    cores = [n for n in names if n in CORE_MODULES or any(_within(n, p) for p in CORE_PACKAGES)]
    assert set(CORE_MODULES) <= set(names), set(CORE_MODULES) - set(names)
    bad = []
    for core in cores:
        seen, todo = set(), [core]
        while todo:
            name = todo.pop()
            if name in seen or name not in names:
                continue
            seen.add(name)
            for imported in _imports(name, names[name], typing_only=False):
                if imported.split(".")[0] in IO_MODULES and (name, imported) not in PURE_USES:
                    bad.append(f"{core}: {names[name].relative_to(ROOT)} imports {imported}")
                parts = imported.split(".")  # importing a.b.c runs a/__init__ and a/b/__init__ first
                todo.extend(".".join(parts[:i]) for i in range(1, len(parts) + 1))
            if _opens_files(names[name]):
                bad.append(f"{core}: {names[name].relative_to(ROOT)} calls open()")
    assert not bad, "\n".join(bad)


def _opens_files(path: pathlib.Path) -> bool:
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open"
               for node in ast.walk(ast.parse(path.read_text())))


def test_modules_are_small():
    big = [f"{path.relative_to(ROOT)}: {n} lines" for _, path in _modules()
           if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not big, "\n".join(big)


def test_the_rules_catch_a_wrong_import(tmp_path):
    """The checker itself: a lab import in the proxy and a proxy import in swarm are both seen."""
    assert _rule("proxy.download.fallback") == ALLOWED["proxy"]
    assert _rule("proxy.demo.slow_origin") == ALLOWED["proxy.demo"]
    module = tmp_path / "x.py"
    module.write_text("from bench.lab import cli\nimport proxy.download.fallback\nfrom . import sibling\n")
    assert list(_imports("swarm.core.x", module)) == ["bench.lab.cli", "proxy.download.fallback", "swarm.core"]
