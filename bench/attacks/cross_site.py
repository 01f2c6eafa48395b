"""A web page making the proxy fetch a URL (issue 35 §2): `/_swarm/fetch` asked in every shape a browser sends it.

    python bench/attacks/cross_site.py [--tree DIR] [--before DIR] [--json FILE]

For each request shape below, against `swarmproxy run` as a real process: the request goes to
`/_swarm/fetch?url=TARGET/<shape>`, TARGET being a local origin only this machine reaches, and the script reports
the proxy's status and whether the target was fetched. A page's shapes replay, field for field, what Debian's
Chromium 156 and Firefox ESR 153 sent for pages of another origin on this machine (tests/extension/
test_cross_site.py runs such pages in both browsers); `curl` and `swarmproxy get` are the real programs, run
against the proxy. Only the fields that say on whose behalf a browser asks are replayed (Origin, Sec-Fetch-*,
Referer) and the extension's own `Swarm-Client`.

--tree picks the source tree whose proxy runs (default: this checkout); --before adds a second tree, shown in a
column of its own, e.g. the last commit: `mkdir /tmp/base && git archive HEAD | tar -x -C /tmp/base`.
Prints a table and JSON (also written to --json). Only 127.0.0.1 is used.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

from bittorrent.settings import PRIVATE_NETWORK_ENV

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = "http://localhost:5555"  # the page's origin in the replayed fields: another site than 127.0.0.1
TIMEOUT_S = 10.0

# (shape, who sends it, the request's method and fields). A page's request must never be fetched; the others must.
SHAPES: list[tuple[str, str, str, list[tuple[str, str]]]] = [
    ("img", "page (Chromium)", "GET", [
        ("Sec-Fetch-Site", "cross-site"), ("Sec-Fetch-Mode", "no-cors"), ("Sec-Fetch-Dest", "image"),
        ("Referer", PAGE + "/")]),
    ("img, same site (127.0.0.1:other port)", "page (Firefox)", "GET", [
        ("Referer", "http://127.0.0.1:5555/"), ("Sec-Fetch-Dest", "image"), ("Sec-Fetch-Mode", "no-cors"),
        ("Sec-Fetch-Site", "same-site")]),
    ("fetch no-cors", "page (Chromium)", "GET", [
        ("Sec-Fetch-Site", "cross-site"), ("Sec-Fetch-Mode", "no-cors"), ("Sec-Fetch-Dest", "empty"),
        ("Referer", PAGE + "/")]),
    ("fetch cors", "page (Firefox)", "GET", [
        ("Referer", PAGE + "/"), ("Origin", PAGE), ("Sec-Fetch-Dest", "empty"), ("Sec-Fetch-Mode", "cors"),
        ("Sec-Fetch-Site", "cross-site")]),
    ("form GET (into a frame)", "page (Chromium)", "GET", [
        ("Sec-Fetch-Site", "cross-site"), ("Sec-Fetch-Mode", "navigate"), ("Sec-Fetch-Dest", "iframe"),
        ("Referer", PAGE + "/")]),
    ("form POST", "page (Chromium)", "POST", [
        ("Origin", PAGE), ("Sec-Fetch-Site", "cross-site"), ("Sec-Fetch-Mode", "navigate"),
        ("Sec-Fetch-Dest", "iframe"), ("Referer", PAGE + "/")]),
    ("navigation by the page", "page (Firefox)", "GET", [
        ("Referer", PAGE + "/"), ("Sec-Fetch-Dest", "document"), ("Sec-Fetch-Mode", "navigate"),
        ("Sec-Fetch-Site", "cross-site")]),
    ("<a download> without referrer", "page (Chromium)", "GET", [
        ("Sec-Fetch-Site", "cross-site"), ("Sec-Fetch-Mode", "navigate"), ("Sec-Fetch-Dest", "document")]),
    ("sandboxed frame's fetch", "page", "GET", [
        ("Origin", "null"), ("Sec-Fetch-Site", "cross-site"), ("Sec-Fetch-Mode", "cors"),
        ("Sec-Fetch-Dest", "empty")]),
    ("navigation typed by the user", "user (Chromium)", "GET", [
        ("Sec-Fetch-Site", "none"), ("Sec-Fetch-Mode", "navigate"), ("Sec-Fetch-User", "?1"),
        ("Sec-Fetch-Dest", "document")]),
    ("navigation typed by the user", "user (Firefox)", "GET", [
        ("Sec-Fetch-Dest", "document"), ("Sec-Fetch-Mode", "navigate"), ("Sec-Fetch-Site", "none"),
        ("Sec-Fetch-User", "?1")]),
    ("extension fetch (status, records)", "extension (Chromium)", "GET", [
        ("Sec-Fetch-Site", "none"), ("Sec-Fetch-Mode", "cors"), ("Sec-Fetch-Dest", "empty")]),
    ("extension fetch (status, records)", "extension (Firefox)", "GET", [
        ("Sec-Fetch-Dest", "empty"), ("Sec-Fetch-Mode", "cors"), ("Sec-Fetch-Site", "same-origin")]),
    ("extension download", "extension (Chromium)", "GET", [
        ("Swarm-Client", "extension"), ("Sec-Fetch-Site", "cross-site"), ("Sec-Fetch-Mode", "navigate"),
        ("Sec-Fetch-Dest", "empty")]),
    ("extension download", "extension (Firefox)", "GET", [
        ("Swarm-Client", "extension"), ("Sec-Fetch-Dest", "empty"), ("Sec-Fetch-Mode", "no-cors"),
        ("Sec-Fetch-Site", "none")]),
    # What the extension sent before it named itself (Swarm-Client): Chromium's downloads.download is cross-site.
    ("extension download without its field", "old extension (Chromium)", "GET", [
        ("Sec-Fetch-Site", "cross-site"), ("Sec-Fetch-Mode", "navigate"), ("Sec-Fetch-Dest", "empty")]),
]
PROGRAMS = [("curl", "program"), ("swarmproxy get", "program")]


class _Target(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self.hits.append(self.path)
        body = b"a file only this machine reaches\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def start_proxy(tree: pathlib.Path, workdir: pathlib.Path) -> tuple[subprocess.Popen, str]:
    ready = workdir / "ready.json"
    argv = [sys.executable, "-m", "proxy.cli", "run", "--listen", "127.0.0.1:0", "--ready-file", str(ready),
            "--data-dir", str(workdir / "data"), "--dht-listen", "off", "--peer-listen", "off",
            "--no-lan-discovery"]
    process = subprocess.Popen(argv, cwd=tree, env=_env(tree), stdout=open(workdir / "proxy.log", "wb"),
                               stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while not ready.exists():  # the proxy writes it once it listens
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"swarmproxy did not start: {(workdir / 'proxy.log').read_text()}")
        time.sleep(0.05)
    return process, json.loads(ready.read_text())["proxy"]


def _env(tree: pathlib.Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k == PRIVATE_NETWORK_ENV or (not k.startswith("SWARMPROXY_") and k.lower() != "http_proxy")}
    env["PYTHONPATH"] = str(tree)
    return env


def raw_status(proxy: str, method: str, target: str, fields: list[tuple[str, str]]) -> int:
    """The status of one request sent as a browser would (its fields, in its order), the answer read whole."""
    host, port = proxy.rsplit(":", 1)
    head = f"{method} {target} HTTP/1.1\r\nHost: {proxy}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields)
    head += "Content-Length: 0\r\nConnection: close\r\n\r\n"
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        sock.sendall(head.encode("latin-1"))
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return int(answer.split(b" ", 2)[1])


def program_status(name: str, tree: pathlib.Path, proxy: str, url: str, workdir: pathlib.Path) -> int | str:
    if name == "curl":
        if shutil.which("curl") is None:
            return "no curl"
        out = subprocess.run(["curl", "-s", "-o", os.devnull, "-w", "%{http_code}", "--noproxy", "*",
                              f"http://{proxy}/_swarm/fetch?url={urllib.parse.quote(url, safe='')}"],
                             capture_output=True, text=True, timeout=TIMEOUT_S)
        return int(out.stdout or 0)
    done = subprocess.run([sys.executable, "-m", "proxy.cli", "get", "-q", "--proxy", proxy, "-o",
                           str(workdir / "got"), url], cwd=tree, env=_env(tree), capture_output=True,
                          timeout=TIMEOUT_S)
    return 200 if done.returncode == 0 else f"exit {done.returncode}"


def measure(tree: pathlib.Path) -> list[dict]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Target)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    target = f"http://127.0.0.1:{server.server_address[1]}"
    _Target.hits.clear()
    rows = []
    with tempfile.TemporaryDirectory(prefix="cross-site-") as tmp:
        workdir = pathlib.Path(tmp)
        process, proxy = start_proxy(tree, workdir)
        try:
            for index, (shape, who, method, fields) in enumerate(SHAPES + [(n, w, "GET", []) for n, w in PROGRAMS]):
                path = f"/secret/{index}"
                url = target + path
                if fields or who != "program":
                    status = raw_status(proxy, method, f"/_swarm/fetch?url={urllib.parse.quote(url, safe='')}",
                                        fields)
                else:
                    status = program_status(shape, tree, proxy, url, workdir)
                rows.append({"shape": shape, "from": who, "method": method, "status": status,
                             "fetched": path in _Target.hits, "must_fetch": not who.startswith(("page", "old"))})
        finally:
            process.terminate()
            process.wait(10)
            server.shutdown()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=pathlib.Path, default=ROOT, help="the tree whose proxy runs (after)")
    parser.add_argument("--before", type=pathlib.Path, help="another tree to compare (before)")
    parser.add_argument("--json", type=pathlib.Path, help="also write the results here")
    args = parser.parse_args(argv)
    trees = ([("before", args.before)] if args.before else []) + [("after", args.tree)]
    results = {label: measure(tree.resolve()) for label, tree in trees}
    print(f"{'request shape':42} {'from':25} {'must':10} " + " ".join(f"{label + ': status, fetched?':28}"
                                                                      for label, _ in trees))
    for i, row in enumerate(results["after"]):
        cells = []
        for label, _ in trees:
            other = results[label][i]
            cells.append(f"{str(other['status']) + ', ' + ('FETCHED' if other['fetched'] else 'not fetched'):28}")
        must = "fetch" if row["must_fetch"] else "not fetch"
        print(f"{row['method'] + ' ' + row['shape']:42} {row['from']:25} {must:10} " + " ".join(cells))
    report = {"command": " ".join([sys.executable, *sys.argv]), "trees": {k: str(v) for k, v in trees},
              "results": results}
    text = json.dumps(report, indent=1)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
