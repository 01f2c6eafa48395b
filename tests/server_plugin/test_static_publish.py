"""`swarmproxy manifest publish` without a web server: the walker, the sidecars and their index, the errors, and
the nginx/Apache text for odd file names (read back here as nginx and Apache read quoted strings). The real nginx
is driven by test_static_publish_nginx.py."""

from __future__ import annotations

import errno
import json
import os
import re

import pytest

from server_plugin import static_config as config
from server_plugin import static_publish as sp
from server_plugin.publisher import LAYER_PREFIX
from swarm.content.manifest import INLINE_HASHES, build_manifest, choose_block_size, parse_header

BIG = os.urandom(100 * 16384 + 5)  # 101 blocks of 16 KiB: its layer is a sidecar
SMALL = os.urandom(3 * 16384)  # 3 blocks: inline


def publish(directory, *extra: str, capsys=None) -> tuple[int, dict[str, str]]:
    """Run the command in-process; (exit status, the configuration files it wrote)."""
    out = directory.parent / "conf"
    status = sp.main(["publish", str(directory), "--config-dir", str(out), "--url-prefix", "/files", *extra])
    files = {p.name: p.read_bytes().decode("utf-8", "surrogateescape") for p in out.glob("*.conf")} \
        if out.exists() else {}
    return status, files


def nginx_unquote(token: str) -> str:
    """What nginx makes of a double-quoted token (ngx_conf_read_token): \\" \\' \\\\ and \\t \\r \\n."""
    assert token[0] == token[-1] == '"'
    return re.sub(r'\\(["\'\\trn])', lambda m: {"t": "\t", "r": "\r", "n": "\n"}.get(m[1], m[1]), token[1:-1])


def nginx_map(text: str) -> dict[str, str]:
    """The map's entries, keys and values unquoted as nginx reads them."""
    body = text[text.index("map $uri $swarm_manifest {"):]
    pairs = re.findall(r'^    ("(?:[^"\\]|\\.)*") ("(?:[^"\\]|\\.)*");$', body, re.MULTILINE)
    return {nginx_unquote(key): nginx_unquote(value) for key, value in pairs}


def lookup(entries: dict[str, str], uri: str) -> str:
    """nginx's map lookup: exact strings ASCII-case-insensitively first, then the regexes in order."""
    exact = {k.encode("utf-8", "surrogateescape").lower(): v for k, v in entries.items() if not k.startswith("~")}
    found = exact.get(uri.encode("utf-8", "surrogateescape").lower())
    if found is not None:
        return found
    for key, value in entries.items():
        pattern = key[1:].encode("utf-8", "surrogateescape")
        if key.startswith("~") and re.search(pattern, uri.encode("utf-8", "surrogateescape")):
            return value
    return ""


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "www"
    (root / "sub").mkdir(parents=True)
    (root / "big.bin").write_bytes(BIG)
    (root / "sub" / "small.bin").write_bytes(SMALL)
    return root


def test_a_tree_is_published_with_sidecars_for_long_layers_and_inline_hashes_for_short_ones(tree):
    status, files = publish(tree)
    assert status == 0 and set(files) == {config.NGINX_HTTP, config.NGINX_SERVER}
    entries = nginx_map(files[config.NGINX_HTTP])
    assert set(entries) == {"/files/big.bin", "/files/sub/small.bin"}
    big, small = parse_header(entries["/files/big.bin"]), parse_header(entries["/files/sub/small.bin"])
    assert small.hashes is not None and len(small.hashes) == 3 <= INLINE_HASHES
    assert big.layer_path == LAYER_PREFIX + big.root.hex()
    expected, layer = build_manifest([BIG], len(BIG))
    assert (big.root, big.block_size) == (expected.root, choose_block_size(len(BIG)))
    # The sidecar is what the proxy's fetch_layer expects at that path: the raw hashes, checked against the root.
    raw = (tree / ".well-known" / "swarm-layer" / big.root.hex()).read_bytes()
    assert raw == b"".join(layer) and len(raw) == 101 * 32
    big.manifest().verify_layer([raw[i:i + 32] for i in range(0, len(raw), 32)])
    assert oct((tree / ".well-known" / "swarm-layer" / big.root.hex()).stat().st_mode & 0o777) == "0o644"
    server = files[config.NGINX_SERVER]
    assert "add_header Swarm-Manifest $swarm_manifest;" in server
    assert f'alias "{tree}/.well-known/swarm-layer/";' in server and "default_type application/octet-stream;" in server
    assert 'add_header Cache-Control "public, max-age=86400";' in server


def test_the_web_server_can_read_the_sidecars_whatever_the_umask(tree):
    old = os.umask(0o077)
    try:
        assert publish(tree)[0] == 0
    finally:
        os.umask(old)
    layers = tree / ".well-known" / "swarm-layer"
    for path in (tree / ".well-known", layers, *layers.iterdir()):
        assert path.stat().st_mode & 0o444 == 0o444, path


def test_a_rerun_hashes_only_what_changed_and_removes_stale_sidecars(tree, monkeypatch, capsys):
    assert publish(tree)[0] == 0
    hashed = []
    real = sp.hash_file
    monkeypatch.setattr(sp, "hash_file", lambda found, *a: hashed.append(found.rel) or real(found, *a))
    status, files = publish(tree)
    assert status == 0 and hashed == []
    assert "0.0 MB hashed, layer sidecars 0 written, 1 kept, 0 removed" in capsys.readouterr().err
    old_root = parse_header(nginx_map(files[config.NGINX_HTTP])["/files/big.bin"]).root.hex()

    (tree / "big.bin").write_bytes(BIG[::-1])
    status, files = publish(tree)
    assert status == 0 and hashed == ["big.bin"]
    new = parse_header(nginx_map(files[config.NGINX_HTTP])["/files/big.bin"])
    layers = tree / ".well-known" / "swarm-layer"
    assert (layers / new.root.hex()).exists() and not (layers / old_root).exists()
    assert "1 written, 0 kept, 1 removed" in capsys.readouterr().err
    index = json.loads((layers / "index.json").read_text())
    assert index["dir"] == str(tree) and set(index["files"]) == {"big.bin", "sub/small.bin"}


def test_a_damaged_sidecar_or_another_block_size_means_hashing_again(tree, monkeypatch):
    publish(tree)
    layers = tree / ".well-known" / "swarm-layer"
    sidecar = next(p for p in layers.iterdir() if re.fullmatch("[0-9a-f]{64}", p.name))
    sidecar.write_bytes(bytes(len(sidecar.read_bytes())))  # right length, wrong hashes
    hashed = []
    real = sp.hash_file
    monkeypatch.setattr(sp, "hash_file", lambda found, *a: hashed.append(found.rel) or real(found, *a))
    assert publish(tree)[0] == 0 and hashed == ["big.bin"]
    parse_header(nginx_map(publish(tree)[1][config.NGINX_HTTP])["/files/big.bin"]).manifest().verify_layer(
        [sidecar.read_bytes()[i:i + 32] for i in range(0, len(sidecar.read_bytes()), 32)])
    hashed.clear()
    status, files = publish(tree, "--block-size", "64k")
    assert status == 0 and sorted(hashed) == ["big.bin", "sub/small.bin"]
    assert parse_header(nginx_map(files[config.NGINX_HTTP])["/files/big.bin"]).block_size == 65536


def test_the_walker_skips_hidden_files_the_layers_and_refuses_links_out_of_the_tree(tree, tmp_path):
    outside = tmp_path / "secret.txt"
    outside.write_bytes(b"not for the web")
    (tree / ".hidden").write_bytes(b"x")
    (tree / ".dir").mkdir()
    (tree / ".dir" / "in.bin").write_bytes(b"y")
    (tree / "out-link").symlink_to(outside)
    (tree / "sub" / "up").symlink_to(tree)  # a loop
    (tree / "in-link").symlink_to(tree / "big.bin")
    (tree / "dir-link").symlink_to(tree / "sub")
    os.mkfifo(tree / "fifo")
    tally = sp.Tally()
    found = [f.rel for f in sp.walk(str(tree), hidden=False, skip=set(), tally=tally)]
    # files before directories, in name order; a link back up the tree (a loop) is not followed
    assert found == ["big.bin", "in-link", "dir-link/small.bin", "sub/small.bin"]
    assert tally.skipped == {"symlinks leaving DIR": 1} and tally.failed == 0
    publish(tree)
    layers = tree / ".well-known" / "swarm-layer"
    tally = sp.Tally()
    hidden = {f.rel for f in sp.walk(str(tree), hidden=True, skip={sp._id(str(layers))}, tally=tally)}
    assert {".hidden", ".dir/in.bin"} <= hidden and not any("swarm-layer" in rel for rel in hidden)


def test_odd_names_reach_nginx_as_its_uri_and_apache_as_its_path(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    names = ['a b.iso', 'quote".bin', "back\\slash.bin", "dollar$x;{}.bin", "é 中.bin", "100%.bin", "q?#.bin",
             "Case.bin", "case.bin", "CASE.BIN"]
    for i, name in enumerate(names):
        (root / name).write_bytes(bytes([i]) * 100)
    raw_name = b"latin1-\xe9.bin"  # not UTF-8: nginx and Apache compare bytes, so do we
    (root / os.fsdecode(raw_name)).write_bytes(b"z" * 100)
    status, files = publish(root, "--server", "both")
    assert status == 0
    entries = nginx_map(files[config.NGINX_HTTP])
    for i, name in enumerate(names):
        header = lookup(entries, "/files/" + name)  # $uri: percent-decoded
        assert parse_header(header).root == build_manifest([bytes([i]) * 100], 100)[0].root, name
    assert lookup(entries, "/files/" + os.fsdecode(raw_name))
    assert lookup(entries, "/files/cASE.bin") == ""  # only regexes for the clashing names: no false match
    assert lookup(entries, "/files/A B.ISO") == entries["/files/a b.iso"]  # nginx's own case-insensitivity
    assert not any(k.startswith("~") for k in entries if "ase" not in k.lower())
    # Apache: one <LocationMatch> per file, its regex untouched by Apache's unquoting (no quote, no \\ pair)
    apache = files[config.APACHE]
    regexes = dict(re.findall(r'<LocationMatch "([^"]*)">\n    Header set Swarm-Manifest "([^"]*)"\n', apache))
    assert len(regexes) == len(names) + 1
    for name in names:
        matching = [v for k, v in regexes.items() if re.search(k.encode("utf-8", "surrogateescape"),
                                                               ("/files/" + name).encode("utf-8", "surrogateescape"))]
        assert len(matching) == 1 and parse_header(matching[0]).size == 100, name


def test_a_name_with_a_control_character_is_skipped_with_a_warning(tmp_path, capsys):
    root = tmp_path / "www"
    root.mkdir()
    (root / "line\nbreak.bin").write_bytes(b"x" * 10)
    (root / "ok.bin").write_bytes(b"y" * 10)
    status, files = publish(root)
    assert status == 0 and list(nginx_map(files[config.NGINX_HTTP])) == ["/files/ok.bin"]
    assert "1 unnameable in a server configuration" in capsys.readouterr().err


def test_an_unreadable_file_is_skipped_counted_and_the_exit_status_says_so(tree, monkeypatch, capsys):
    real = sp.hash_file

    def hash_file(found, *args):
        if found.rel == "sub/small.bin":
            raise PermissionError(errno.EACCES, "Permission denied")
        return real(found, *args)
    monkeypatch.setattr(sp, "hash_file", hash_file)
    status, files = publish(tree)
    err = capsys.readouterr().err
    assert status == 1 and list(nginx_map(files[config.NGINX_HTTP])) == ["/files/big.bin"]
    assert "skipping" in err and "small.bin: Permission denied" in err and "1 unreadable" in err


def test_a_file_that_changes_while_hashed_is_not_published(tree):
    st = (tree / "big.bin").stat()
    with pytest.raises(sp.Changed):
        sp.hash_file(sp.Found("big.bin", str(tree / "big.bin"), st.st_size - 1, st.st_mtime_ns), 16384)
    with pytest.raises(sp.Changed):
        sp.hash_file(sp.Found("big.bin", str(tree / "big.bin"), st.st_size, st.st_mtime_ns + 1), 16384)


def test_a_full_disk_stops_with_a_clear_message_and_no_configuration(tree, monkeypatch, capsys):
    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(sp.os, "fsync", full)
    status, files = publish(tree)
    err = capsys.readouterr().err
    assert status == 1 and files == {}
    assert "disk full: cannot write" in err and "No space left on device" in err
    assert not [p for p in (tree / ".well-known" / "swarm-layer").iterdir()]  # no temporary file left


def test_usage_errors(tmp_path, capsys):
    assert sp.main(["publish", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "file").write_bytes(b"x")
    assert sp.main(["publish", str(tmp_path / "file")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    shared = tmp_path / "layers"
    assert sp.main(["publish", str(tmp_path / "a"), "--layers-dir", str(shared), "--quiet"]) == 0
    assert sp.main(["publish", str(tmp_path / "b"), "--layers-dir", str(shared), "--quiet"]) == 2
    assert "holds the layers of" in capsys.readouterr().err
    assert sp.main(["publish", str(tmp_path / "a"), "--layers-dir", str(tmp_path / "$x")]) == 2
    for bad in (["--block-size", "1000"], ["--block-size", "8k"], ["--url-prefix", "files"], ["--min-size", "x"]):
        with pytest.raises(SystemExit) as exit_:
            sp.main(["publish", str(tmp_path / "a"), *bad])
        assert exit_.value.code == 2


@pytest.mark.parametrize("text, value", [("65536", 65536), ("16k", 16384), ("4M", 4 << 20), ("1GiB", 1 << 30),
                                         ("2 KB", 2048)])
def test_sizes(text, value):
    assert sp.parse_size(text) == value


@pytest.mark.parametrize("flag, text, value", [("--block-size", "64k", 65536), ("--block-size", "4M", 4 << 20),
                                               ("--block-size", "auto", None), ("--min-size", "1k", 1024)])
def test_size_flags_read_k_as_1024(flag, text, value):
    args = sp.build_parser().parse_args(["publish", "DIR", flag, text])
    assert getattr(args, flag[2:].replace("-", "_")) == value


@pytest.mark.parametrize("text", ["16M", "8k", "1000"])
def test_a_refused_block_size_states_the_real_bounds(text, capsys):
    with pytest.raises(SystemExit) as exit_:
        sp.build_parser().parse_args(["publish", "DIR", "--block-size", text])
    assert exit_.value.code == 2
    assert f"block size {text!r} is not auto or a power of two from 16Ki to 4Mi" in capsys.readouterr().err


def test_the_help_explains_the_command(capsys):
    with pytest.raises(SystemExit):
        sp.main(["publish", "--help"])
    out = capsys.readouterr().out
    for words in ("--layers-dir", "--url-prefix", "--server", "--block-size", "--jobs", "nginx-http.conf",
                  "add_header Swarm-Manifest $swarm_manifest", "<LocationMatch>", "Exit status"):
        assert words in out


def test_map_hash_sizes_fit_every_key():
    keys = [b"/" + b"x" * n for n in (1, 50, 300)]
    bucket, max_size = config.map_hash_sizes(keys)
    assert bucket >= 8 * config._hash_element(keys[-1]) and bucket & (bucket - 1) == 0 and max_size >= 2048
    huge = [b"/" + b"y" * 5000]
    assert config.map_hash_sizes(huge)[0] >= config._hash_element(huge[0]) + 8


def test_path_regex_escapes_everything_a_config_parser_could_touch():
    regex = config.path_regex('/a b"\\$.é')
    assert regex == "^/a\\x20b\\x22\\x5c\\x24\\.é$" and '"' not in regex and "\\\\" not in regex
    assert re.fullmatch(regex, '/a b"\\$.é') and not re.fullmatch(regex, '/a b"\\$xé')


def test_swarmproxy_finds_the_command_through_its_entry_point():
    from proxy import cli  # the test may join what the product keeps apart: proxy never imports server_plugin

    entry = cli.plugin_commands()["manifest"]
    assert entry.load() is sp.main and cli._summary(entry).startswith("publish file manifests from nginx or Apache")
