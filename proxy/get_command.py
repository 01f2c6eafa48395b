"""`swarmproxy get URL|MAGNET|FILE.torrent`: download a file through a running swarmproxy, as curl -O or wget do.

The download itself is the proxy's: for a URL its explicit fetch (`GET /_swarm/fetch?url=URL`,
`proxy.fetch_endpoint`): the proxy is the TLS client, verifies the origin, starts at the origin and switches to
verified peer blocks when it is slow; for a BitTorrent v2 magnet link or .torrent file `proxy.torrent_fetch`
(BitTorrent peers and ours, verified by the v2 pieces root). Either way the proxy keeps sharing the file
afterwards, which a command that exits could not. This module only streams the answer into a file, with a
progress line, a resume of a partial file (`-c`, URLs only) and exit codes a script can trust (`EXIT_CODES`).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import pathlib
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import BinaryIO

from bittorrent.target import MAX_TORRENT

from .config import running_proxy
from .errors import ConfigError
from .fetch_endpoint import NAME_FIELD, TORRENT_PATH

DEFAULT_TORRENT_NAME = "download.bin"  # a torrent's file whose name is no use as one (empty, `..`)

CHUNK = 256 * 1024
PROGRESS_EVERY = 0.5  # seconds between progress lines
DEFAULT_NAME = "index.html"  # wget's name for a URL whose path ends in /

OK, USAGE, NO_PROXY, HTTP_ERROR, ORIGIN_UNREACHABLE, WRITE_ERROR, INCOMPLETE = 0, 2, 3, 4, 5, 6, 7
EXIT_CODES = {
    OK: "the file is complete",
    USAGE: "bad arguments",
    NO_PROXY: "no swarmproxy answers at --proxy",
    HTTP_ERROR: "the origin answered with an HTTP error (4xx/5xx of its own), or the proxy refused the magnet or "
                "torrent (it says why)",
    ORIGIN_UNREACHABLE: "the origin could not be reached or verified (DNS, connect, TLS certificate, timeout)",
    WRITE_ERROR: "the output file could not be written (disk full, permissions)",
    INCOMPLETE: "the transfer was cut off before the end (run again, with -c for a URL, to resume)",
}


class GetError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def add_command(commands: argparse._SubParsersAction) -> None:
    get = commands.add_parser(
        "get", help="download a URL (https too), a magnet link or a .torrent file through a running proxy",
        description="Download URL through a running swarmproxy (its /_swarm/fetch): the proxy verifies an "
                    "https origin as a browser would, starts at the origin, switches to verified peer blocks "
                    "when it is slow, and shares the file afterwards. A BitTorrent v2 magnet link or .torrent "
                    "file is downloaded from BitTorrent peers and swarmproxy peers together, verified by its v2 "
                    "pieces root (the proxy needs its BitTorrent session: the Internet mode's, whose DHT finds "
                    "the torrent's peers, or --bt-listen's; v1-only torrents are refused). Exit codes: "
                    + "; ".join(f"{code} {text}" for code, text in EXIT_CODES.items()) + ".",
    )
    get.add_argument("url", metavar="URL", help="an http:// or https:// URL, a magnet:?xt=urn:btmh:… link, or "
                                                "the path of a .torrent file")
    get.add_argument("-o", "--output", metavar="FILE", default=None,
                     help="where to write (default: the URL's last path segment, or the torrent's file name, in "
                          "the current directory; - for standard output)")
    get.add_argument("--file", metavar="PATH", default=None,
                     help="the file to download from a torrent of several (its path inside the torrent)")
    get.add_argument("--peer", metavar="HOST:PORT", action="append", default=[],
                     help="a BitTorrent peer to dial for a magnet or .torrent (repeatable; a .torrent names none, "
                          "and trackers and the BitTorrent DHT are off). A private address must be listed in the "
                          "proxy's --share-private-origins")
    get.add_argument("-c", "--continue", dest="resume", action="store_true",
                     help="resume a partial FILE from where it ends (a Range request; says the byte it resumes "
                          "at, and warns when the origin ignores the Range and the file starts over)")
    get.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    get.add_argument("--proxy", default=None, metavar="HOST:PORT",
                     help="where the proxy listens (default: SWARMPROXY_LISTEN, else 127.0.0.1:8080)")


def run(args: argparse.Namespace) -> int:
    try:
        where = running_proxy(args.proxy)
    except ConfigError as exc:
        print(f"swarmproxy get: --proxy: {exc}", file=sys.stderr)
        return USAGE
    proxy = f"http://{where}"
    try:
        if args.url.startswith("magnet:") or os.path.isfile(args.url):
            if args.resume:
                raise GetError(USAGE, "-c resumes URLs only: a torrent's download resumes from the proxy's store")
            return _download(proxy, _torrent_request(proxy, args.url, args.file, args.peer), args.output, None,
                             resume=False, quiet=args.quiet)
        if urllib.parse.urlsplit(args.url).scheme.lower() not in ("http", "https"):
            raise GetError(USAGE, f"{args.url!r} is not an http:// or https:// URL, a magnet link or a file")
        request = urllib.request.Request(f"{proxy}/_swarm/fetch?{urllib.parse.urlencode({'url': args.url})}")
        return _download(proxy, request, args.output or _name_for(args.url), args.url, resume=args.resume,
                         quiet=args.quiet)
    except GetError as exc:
        print(f"swarmproxy get: {exc}", file=sys.stderr)
        return exc.code


def _name_for(url: str) -> str:
    name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
    return pathlib.Path(name).name or DEFAULT_NAME  # never a path of the server's choosing


def _torrent_request(proxy: str, what: str, file: str | None, peers: list[str]) -> urllib.request.Request:
    """The proxy's torrent fetch (`proxy.torrent_fetch`): a magnet in the query, or the .torrent file's bytes."""
    query = ([("file", file)] if file else []) + [("peer", peer) for peer in peers]
    if what.startswith("magnet:"):
        return urllib.request.Request(f"{proxy}{TORRENT_PATH}?{urllib.parse.urlencode([('magnet', what), *query])}")
    try:
        with open(what, "rb") as torrent:
            data = torrent.read(MAX_TORRENT + 1)
    except OSError as exc:
        raise GetError(USAGE, f"cannot read {what}: {exc.strerror or exc}") from None
    if len(data) > MAX_TORRENT:
        raise GetError(USAGE, f"{what} is larger than a .torrent file may be ({MAX_TORRENT:,} bytes)")
    suffix = f"?{urllib.parse.urlencode(query)}" if query else ""
    return urllib.request.Request(f"{proxy}{TORRENT_PATH}{suffix}", data=data, method="POST",
                                  headers={"Content-Type": "application/x-bittorrent"})


def _download(proxy: str, request: urllib.request.Request, output: str | None, url: str | None, *, resume: bool,
              quiet: bool) -> int:
    """Stream the proxy's answer to `request` into `output` (None: the name the proxy gives, `NAME_FIELD`); `url`:
    the URL asked for, whose record says how much came from peers."""
    to_stdout = output == "-"
    have = 0
    if resume and output is not None and not to_stdout:
        try:
            have = os.path.getsize(output)
        except OSError:
            have = 0
    if have:
        request.add_header("Range", f"bytes={have}-")
    # No proxy for this request, whatever http_proxy says: it goes to swarmproxy itself.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    started = time.monotonic()
    try:
        response = opener.open(request, timeout=None)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:
            if not quiet:
                print(f"{output} is complete already ({have:,} bytes)", file=sys.stderr)
            return OK
        text = exc.read(4096).decode("utf-8", "replace").strip()
        own = "Via" not in exc.headers  # what the proxy relays carries its Via; its own answers do not
        code = ORIGIN_UNREACHABLE if own and exc.code in (502, 504) else HTTP_ERROR
        raise GetError(code, text if own else f"the origin answered {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise GetError(NO_PROXY, f"no swarmproxy answers at {proxy}: {reason} (start one with "
                                 "`swarmproxy run`, or say where with --proxy)") from None
    again = "run again with -c to resume" if url else "run it again"
    with response:
        named = output is None  # by the stranger who made the torrent: never over a file that exists
        if output is None:
            output = _given_name(response)
        appending = have and response.status == 206
        if have and not quiet:  # -c: say what it did with the partial file, so that a restart is never a surprise
            print(f"{output}: resuming at byte {have:,}" if appending else
                  f"swarmproxy get: warning: the origin ignored the Range (it answered {response.status}, not 206): "
                  f"{output} is downloaded again from the start", file=sys.stderr)
        total = _total(response, have if appending else 0)
        try:
            sink: BinaryIO = sys.stdout.buffer if to_stdout else \
                open(output, "ab" if appending else "xb" if named else "wb")
        except FileExistsError:
            raise GetError(WRITE_ERROR, f"{output} exists already (the torrent names it so): say where to write "
                                        "with -o") from None
        except OSError as exc:
            raise GetError(WRITE_ERROR, f"cannot write {output}: {exc.strerror or exc}") from None
        got = have if appending else 0
        progress = None if quiet or not sys.stderr.isatty() else _Progress(total, got)
        try:
            while chunk := _read(response, again):
                try:
                    sink.write(chunk)
                except OSError as exc:
                    raise GetError(WRITE_ERROR, f"cannot write {output}: {exc.strerror or exc}") from None
                got += len(chunk)
                if progress is not None:
                    progress.update(got)
        finally:
            if not to_stdout:
                sink.close()
            if progress is not None:
                progress.done()
    if total is not None and got < total:
        raise GetError(INCOMPLETE, f"the transfer stopped at {got:,} of {total:,} bytes; {again}")
    if not quiet:
        elapsed = max(time.monotonic() - started, 1e-6)
        print(f"{'stdout' if to_stdout else output}: {got:,} bytes in {elapsed:.1f} s "
              f"({_size(got / elapsed)}/s){_peer_share(proxy, url) if url else ''}", file=sys.stderr)
    return OK


def _given_name(response) -> str:
    """The file name the proxy gives a torrent's file (the magnet's dn, or the torrent's): one path component, never
    a path of a stranger's choosing."""
    name = pathlib.Path(urllib.parse.unquote(response.headers.get(NAME_FIELD, ""))).name
    return name if name not in ("", ".", "..") else DEFAULT_TORRENT_NAME


def _read(response, again: str) -> bytes:
    try:
        return response.read(CHUNK)
    except (OSError, http.client.HTTPException) as exc:  # IncompleteRead: the proxy cut a body it cannot finish
        raise GetError(INCOMPLETE, f"the transfer was cut off ({type(exc).__name__}); {again}") from None


def _total(response, offset: int) -> int | None:
    length = response.headers.get("Content-Length")
    return offset + int(length) if length and length.isdigit() else None


def _peer_share(proxy: str, url: str) -> str:
    """", 87 % from peers" from the proxy's record of this download, when it has one."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{proxy}/_swarm/requests?limit=20", timeout=5) as answer:
            records = json.load(answer)
    except (urllib.error.URLError, OSError, ValueError):
        return ""
    mine = [r for r in records if isinstance(r, dict) and r.get("url") == url]
    if not mine:
        return ""
    record = mine[-1]
    total = (record.get("bytes_origin") or 0) + (record.get("bytes_peers") or 0)
    if not total:
        return ""
    return f", {100 * (record.get('bytes_peers') or 0) / total:.0f} % from peers"


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n:.0f} B"
        n /= 1024
    return f"{n:.1f} GiB"


class _Progress:
    """One line on stderr, rewritten every PROGRESS_EVERY s: bytes, percent, rate, ETA."""

    def __init__(self, total: int | None, start: int) -> None:
        self.total, self.start, self.began = total, start, time.monotonic()
        self.shown = 0.0

    def update(self, got: int) -> None:
        now = time.monotonic()
        if now - self.shown < PROGRESS_EVERY:
            return
        self.shown = now
        rate = (got - self.start) / max(now - self.began, 1e-6)
        line = f"{_size(got)}"
        if self.total:
            eta = (self.total - got) / rate if rate > 0 else float("inf")
            line += f" / {_size(self.total)}  {100 * got / self.total:3.0f} %  ETA " + \
                (f"{eta:.0f} s" if eta != float("inf") else "?")
        sys.stderr.write(f"\r{line}  {_size(rate)}/s   ")
        sys.stderr.flush()

    def done(self) -> None:
        sys.stderr.write("\n")
