"""`swarmproxy cluster`: help, flags, one-line errors (never a traceback), status and cancel, an agent that
starts before redis."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import threading

import pytest

from bench.cluster_harness import Cluster, RedisServer, free_port, python_command, redis_missing, wait_until
from cluster.cli import build_parser, main, parse_rate
from cluster.intent import SigningKey

needs_redis = pytest.mark.skipif(redis_missing() is not None, reason=str(redis_missing()))
CLEAR = "\x1b[H\x1b[2J"  # what `status --watch` prints before each screen


@pytest.mark.parametrize("text, value", [
    ("125000000", 125e6), ("125M", 125e6), ("1.5G", 1.5e9), ("100Mi", 100 * 2**20), ("800Mbit/s", 100e6),
    ("10kB/s", 10e3), ("0", None), ("none", None),
])
def test_parse_rate(text, value):
    assert parse_rate(text) == value


@pytest.mark.parametrize("text", ["fast", "-1", "1T", ""])
def test_parse_rate_refuses(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_rate(text)


AGENT = ["agent", "--rack", "r", "--dc", "d", "--trust-key", "k", "--identity", "x"]


@pytest.mark.parametrize("text, value", [("1G", 2**30), ("1Gi", 2**30), ("500M", 500 * 2**20), ("0", 0),
                                         ("1073741824", 2**30)])
def test_disk_reserve_is_a_size_whose_k_is_1024(text, value):
    assert build_parser().parse_args([*AGENT, "--disk-reserve", text]).disk_reserve == value


def test_a_bad_disk_reserve_says_why(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args([*AGENT, "--disk-reserve", "lots"])
    assert "--disk-reserve: 'lots' is not a size (e.g. " in capsys.readouterr().err


@pytest.mark.parametrize("command", ["agent", "push", "status", "cancel", "keygen"])
def test_every_command_explains_itself(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert ("--redis" in text or command == "keygen") and len(text) > 300


def test_keygen_prints_the_public_key_and_never_overwrites(tmp_path):
    made = run("keygen", "-o", str(tmp_path / "owner.key"))
    assert made.returncode == 0, made.stderr
    public = made.stdout.strip()
    assert public.startswith("swarmproxy-cluster-ed25519:") and public in made.stderr
    again = run("keygen", "-o", str(tmp_path / "owner.key"))
    assert again.returncode == 1 and "never overwritten" in again.stderr and "Traceback" not in again.stderr


def test_an_agent_needs_a_key_it_trusts(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["agent", "--rack", "r", "--dc", "d"])
    assert "--trust-key" in capsys.readouterr().err
    done = run("agent", "--rack", "r", "--dc", "d", "--trust-key", "not-a-key", "--identity", "x",
               "--redis", "redis://127.0.0.1:1/0")
    assert done.returncode == 1 and "swarmproxy-cluster-ed25519:" in done.stderr and "Traceback" not in done.stderr


def test_an_agent_needs_an_identity_its_owner_admitted(tmp_path, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["agent", "--rack", "r", "--dc", "d", "--trust-key", "k"])
    assert "--identity" in capsys.readouterr().err
    made = run("admit", "--key", owner_key(tmp_path), "--name", "host1", "-o", str(tmp_path / "host1.identity"))
    assert made.returncode == 0 and made.stdout.startswith("swarmproxy-cluster-ed25519:"), made.stderr
    again = run("admit", "--key", owner_key(tmp_path), "--name", "host1", "-o", str(tmp_path / "host1.identity"))
    assert again.returncode == 1 and "never overwritten" in again.stderr
    stranger = SigningKey.generate().public
    base = ("agent", "--rack", "r", "--dc", "d", "--redis", "redis://127.0.0.1:1/0")
    for args, said in [((*base, "--trust-key", stranger, "--identity", str(tmp_path / "host1.identity")),
                        "does not trust"),
                       ((*base, "--trust-key", stranger, "--identity", str(tmp_path / "none")), "cannot read"),
                       ((*base, "--trust-key", stranger, "--identity", owner_key(tmp_path)), "not an agent identity"),
                       ((*base, "--trust-key", SigningKey.load(owner_key(tmp_path)).public, "--identity",
                         str(tmp_path / "host1.identity"), "--name", "host2"), "admitted as 'host1'")]:
        done = run(*args)
        assert done.returncode == 1 and said in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_names_must_fit_in_keys(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["agent", "--rack", "a:b", "--dc", "d"])
    assert "rack 'a:b'" in capsys.readouterr().err


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(python_command(*args), capture_output=True, text=True, timeout=timeout)


def owner_key(tmp_path) -> str:
    path = tmp_path / "owner.key"
    if not path.exists():
        SigningKey.generate().save(path)
    return str(path)


def test_dead_redis_is_one_line_not_a_traceback(tmp_path):
    url = f"redis://127.0.0.1:{free_port()}/0"
    for args in (("status", "--redis", url), ("cancel", "abc", "--redis", url, "--key", owner_key(tmp_path))):
        done = run(*args)
        assert done.returncode == 1
        assert "Traceback" not in done.stderr
        assert done.stderr.startswith("swarmproxy cluster: redis at ") and done.stderr.count("\n") == 1
    missing = run("push", str(tmp_path / "nothing"), "--redis", url, "--key", owner_key(tmp_path))
    assert missing.returncode == 1 and "not a readable file" in missing.stderr
    payload = tmp_path / "payload"
    payload.write_bytes(b"x")
    half = run("push", str(payload), "--redis", url, "--key", owner_key(tmp_path), "--rack", "r2")
    assert half.returncode == 1 and "--dc and --rack go together" in half.stderr and "Traceback" not in half.stderr


def test_a_bad_sentinel_url_or_dead_sentinels_are_one_line_not_a_traceback():
    dead = f"redis+sentinel://u:secret@127.0.0.1:{free_port()},127.0.0.1:{free_port()}/coord"
    for url, says in ((dead, "no sentinel at 127.0.0.1:"), ("redis+sentinel://127.0.0.1:1", "name the service")):
        done = run("status", "--redis", url)
        assert done.returncode == 1 and "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
        assert says in done.stderr and "secret" not in done.stderr, done.stderr


@needs_redis
def test_agent_waits_for_redis_then_joins(tmp_path):
    """Started before redis, the agent says why it waits and retries; once redis is up it registers."""
    server = RedisServer(tmp_path / "redis")
    cluster = Cluster(tmp_path, server, reconcile=0.2)
    agent = cluster.add_agent("early", "127.0.9.1", "d", "r")
    try:
        log = agent.data_dir / "agent.log"
        wait_until(lambda: log.exists() and "retrying every" in log.read_text(), 30, "the agent saying it retries")
        assert agent.alive()
        server.start()
        wait_until(lambda: len(cluster.registered()) == 1, 30, "the agent registered")
        # The record is written inside the reconcile; the line saying so comes once the whole reconcile is done.
        wait_until(lambda: "reachable again" in log.read_text(), 30, "the agent saying redis is back")
        assert "Traceback" not in log.read_text()
    finally:
        cluster.stop_all()
        server.stop()


@needs_redis
def test_status_and_cancel(tmp_path):
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        payload = tmp_path / "data.bin"
        payload.write_bytes(b"x" * 100_000)
        published = run("push", str(payload), "--redis", server.url, "--listen", "127.0.0.1:0", "--no-wait",
                        "--priority", "7", "--quiet", "--key", owner_key(tmp_path))
        assert published.returncode == 0, published.stderr
        tid = json.loads(published.stdout)["transfer"]
        status = run("status", "--json", "--redis", server.url)
        assert status.returncode == 0, status.stderr
        snap = json.loads(status.stdout)
        (transfer,) = snap["transfers"]
        assert transfer["id"] == tid and transfer["priority"] == 7 and transfer["size"] == 100_000
        assert not transfer["cancelled"]
        text = run("status", "--redis", server.url).stdout
        assert tid in text and "data.bin" in text
        assert run("cancel", "ffff", "--redis", server.url, "--key", owner_key(tmp_path)).returncode == 1
        cancelled = run("cancel", tid[:6], "--redis", server.url, "--key", owner_key(tmp_path))
        assert cancelled.returncode == 0 and tid in cancelled.stderr
        assert json.loads(run("status", "--json", "--redis", server.url).stdout)["transfers"][0]["cancelled"]
    finally:
        server.stop()


@needs_redis
def test_status_watch_redraws_until_interrupted(tmp_path):
    """`status --watch` redraws every second, picks up a transfer pushed while it runs, and ends cleanly (status
    0, no traceback) on SIGINT."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    watch = subprocess.Popen(python_command("status", "--watch", "--redis", server.url), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(iter(lambda: watch.stdout.read(1), "")), daemon=True)
    reader.start()
    try:
        wait_until(lambda: "".join(seen).count(CLEAR) >= 1, 30, "a first screen")
        payload = tmp_path / "watched.bin"
        payload.write_bytes(b"y" * 50_000)
        published = run("push", str(payload), "--redis", server.url, "--listen", "127.0.0.1:0", "--no-wait",
                        "--quiet", "--key", owner_key(tmp_path))
        assert published.returncode == 0, published.stderr
        tid = json.loads(published.stdout)["transfer"]
        # A later screen, not the first one, shows it: the command read redis again.
        wait_until(lambda: tid in "".join(seen).split(CLEAR)[-1] and "".join(seen).count(CLEAR) >= 2, 30,
                   "a redrawn screen with the new transfer")
        assert watch.poll() is None  # still watching
        watch.send_signal(signal.SIGINT)
        assert watch.wait(timeout=30) == 0
        assert "Traceback" not in watch.stderr.read()
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
        server.stop()
