"""`swarmproxy torrent export URL|ROOT [-o FILE.torrent]`: a content this node seeds, as a BitTorrent v2 torrent.

Asks the running proxy (its admin API, `/_swarm/torrent`), which seeds every download it shares from a public
origin when it runs with `--bt-listen`: prints the magnet link (`xt=urn:btmh:1220…`, `dn` the file's name, `x.pe`
this node's BitTorrent address, `ws` the origin URL as a web seed) on standard output, the info-hash and where the
.torrent went on standard error. The torrent is canonical: every node holding the content exports the same
info-hash.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request

from .config import HostPort, running_proxy
from .errors import ConfigError

ROOT = re.compile(r"[0-9a-fA-F]{64}")


def add_command(commands: argparse._SubParsersAction) -> None:
    torrent = commands.add_parser(
        "torrent", help="export a shared download as a BitTorrent v2 torrent and magnet link",
        description="Export what a running proxy seeds (swarmproxy run --bt-listen HOST:PORT) as a BitTorrent v2 "
                    "torrent: the magnet link on standard output, the .torrent file with -o. Only downloads the "
                    "proxy shares from public origins are seeded, so only those are exported.",
    )
    actions = torrent.add_subparsers(dest="action", metavar="ACTION", required=True)
    export = actions.add_parser("export", help="print a content's magnet link (and write its .torrent with -o)",
                                description="Print the magnet link of a content the proxy seeds, named by the "
                                            "URL it was downloaded from or by its content root (64 hex digits).")
    export.add_argument("what", metavar="URL|ROOT", help="the download's URL, or its content root")
    export.add_argument("-o", "--output", metavar="FILE.torrent", help="also write the .torrent file here")
    export.add_argument("--hybrid", action="store_true",
                        help="a hybrid torrent, with a v1 part for v1-only clients (one SHA-1 pass over the file the "
                             "first time; another info-hash, also seeded from then on)")
    export.add_argument("--proxy", default=None, metavar="HOST:PORT",
                        help="where the proxy listens (default: SWARMPROXY_LISTEN, else 127.0.0.1:8080)")
    export.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                        help="how long to wait for the proxy (default: 10)")


def run(args: argparse.Namespace) -> int:
    where: HostPort = running_proxy(args.proxy)
    key = "root" if ROOT.fullmatch(args.what) else "url"
    if key == "url" and not urllib.parse.urlsplit(args.what).scheme:
        raise ConfigError(f"{args.what!r} is neither a URL nor a content root (64 hex digits)")
    query = urllib.parse.urlencode({key: args.what, **({"hybrid": "1"} if args.hybrid else {})})
    status, body = _get(where, f"/_swarm/torrent?{query}", args.timeout)
    if status is None:
        print(f"swarmproxy: no proxy answers at {where}: {body.decode(errors='replace')}", file=sys.stderr)
        return 1
    try:
        shown = json.loads(body)
    except ValueError:
        print(f"swarmproxy: the proxy at {where} answered {status} with no JSON", file=sys.stderr)
        return 1
    if status != 200:
        print(f"swarmproxy: {shown.get('error', status)}", file=sys.stderr)
        return 1
    if args.output:
        status, data = _get(where, f"/_swarm/torrent?{query}&format=torrent", args.timeout)
        if status != 200:
            print(f"swarmproxy: the .torrent could not be read: {status}", file=sys.stderr)
            return 1
        try:
            with open(args.output, "wb") as file:
                file.write(data)
        except OSError as exc:
            print(f"swarmproxy: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
            return 1
    print(shown["magnet"])
    v1 = f", v1 {shown['info_hash_v1']}" if shown.get("info_hash_v1") else ""
    print(f"info-hash (v2) {shown['info_hash']}{v1}, {shown['size']:,} bytes"
          + (f"; .torrent written to {args.output}" if args.output else "")
          + ("" if shown.get("peer") else "; no x.pe: this node's address as others see it is not known yet"),
          file=sys.stderr)
    return 0


def _get(where: HostPort, path: str, timeout: float) -> tuple[int | None, bytes]:
    """(status, body) of the admin API's answer, or (None, why) when nothing answered."""
    # No proxy for this request, whatever http_proxy says: we are asking the proxy itself.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://{where}{path}", timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        return None, str(getattr(exc, "reason", exc)).encode()
