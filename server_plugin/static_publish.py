"""`swarmproxy manifest publish DIR`: origin help for servers that run no Python (nginx, Apache).

It walks DIR, hashes each file into its manifest with the block-size rule of `swarm.content.manifest` (the file
is streamed, never held whole), writes every hash layer too long to travel inline as a static sidecar
`LAYERS/<root hex>` (the raw concatenated 32-byte hashes, exactly what the proxy fetches from `LAYER_PREFIX` +
root hex and checks against the root), and prints the server configuration that sends each file's
`Swarm-Manifest` field (server_plugin/static_config.py). An index beside the sidecars (`index.json`: each file's
size, mtime, block size and field) makes a rerun hash only the files that changed. Imports only `swarm.content`
of ours (docs/ARCHITECTURE.md); `swarmproxy manifest` finds `main` through the `swarmproxy.commands` entry point.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import errno
import json
import os
import re
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

from swarm.content.manifest import (
    INLINE_HASHES,
    MAX_BLOCK_SIZE,
    MAX_BLOCKS,
    METADATA_INLINE_HASHES,
    MIN_BLOCK_SIZE,
    READ_SIZE,
    TARGET_MAX_BLOCKS,
    Manifest,
    ManifestError,
    build_manifest,
    choose_block_size,
    format_header,
    parse_header,
)
from swarm.content.merkle import HASH_SIZE, HashMismatch, block_count
from swarm.content.sizes import format_size, parse_block_size, parse_size

from . import static_config as config
from . import static_s3 as s3
from .publisher import LAYER_PREFIX

INDEX_FORMAT = "swarmproxy-static-publish/1"
DEFAULT_LAYERS = LAYER_PREFIX.strip("/")  # under DIR: where the layer path finds them when DIR is the web root
PROGRESS_BYTES = 256 << 20  # a run hashing this much, or this many files, shows its progress on stderr
PROGRESS_FILES = 1000
_HEX_NAME = re.compile(r"[0-9a-f]{64}")

EPILOG = """\
Every file of at least --min-size bytes under DIR is published, hidden files (a name starting with '.') only
with --hidden. A symbolic link is followed while its target stays inside DIR and refused otherwise. A file's
layer of up to 64 block hashes travels inline in its field; a longer one is written once to LAYERS/<root hex>,
served at /.well-known/swarm-layer/<root hex>. A rerun rehashes only files whose size or mtime changed; after
it, reload the server (the fields of changed files changed too).

nginx: include nginx-http.conf inside http { } (a map from $uri to each file's field) and nginx-server.conf
inside the server { } (add_header Swarm-Manifest $swarm_manifest; and the layer location). Apache: include
apache.conf (one <LocationMatch> per file, Alias for the layers; needs mod_headers and mod_alias).
S3 and S3-compatible stores (and a CDN in front of one): --server s3 --bucket NAME writes s3-upload.sh, which
uploads the layers and every file with its field as user metadata (x-amz-meta-swarm-manifest) using the AWS CLI;
layers of more than 32 hashes are sidecars there (S3 keeps 2 KB of metadata). --url-prefix is the key prefix;
--path-style when clients reach the files as https://HOST/BUCKET/KEY rather than https://BUCKET.HOST/KEY.

Exit status: 0 when every file was published or skipped by rule, 1 when a file could not be read (the
configuration is still written for the others) or a sidecar could not be written (nothing more is written),
2 for a usage error.

examples:
  swarmproxy manifest publish /srv/www/files --url-prefix /files --config-dir /etc/nginx/swarm
  swarmproxy manifest publish ./release --server s3 --bucket downloads --url-prefix /v2 > upload.sh && sh upload.sh
"""


class PublishError(Exception):
    """What stops the whole run: a message for the user, and the exit status (2: a usage error)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class Changed(Exception):
    """The file changed while it was hashed."""


@dataclasses.dataclass(frozen=True)
class Found:
    rel: str  # '/'-separated path under DIR, as the file system names it (surrogate-escaped when not UTF-8)
    path: str
    size: int
    mtime_ns: int


@dataclasses.dataclass
class Tally:
    files: int = 0
    bytes: int = 0  # of the files published
    hashed: int = 0  # bytes hashed in this run
    sidecars: set[str] = dataclasses.field(default_factory=set)  # roots of the long layers the files need
    written: set[str] = dataclasses.field(default_factory=set)  # ... of those written in this run
    removed: int = 0
    skipped: dict[str, int] = dataclasses.field(default_factory=dict)
    failed: int = 0  # files that could not be published although they should have been

    def skip(self, reason: str, *, failure: bool = False) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        self.failed += failure


def _url_prefix(text: str) -> str:
    if not text.startswith("/") or config.unusable_path(text):
        raise argparse.ArgumentTypeError(f"a URL prefix is a path starting with '/', not {text!r}")
    return text.rstrip("/")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="swarmproxy manifest",
        description="Publish file manifests from servers that run no Python (nginx, Apache).")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    publish = commands.add_parser(
        "publish", help="hash a directory's files, write their layer sidecars, print nginx/Apache configuration",
        description="Hash every file under DIR into its swarm manifest, write the hash layers as static "
                    "sidecar files, and print (or write with --config-dir) the nginx or Apache configuration "
                    "that adds each file's Swarm-Manifest field to its responses and serves the sidecars at "
                    "/.well-known/swarm-layer/. swarmproxy nodes then trust each file's blocks from the first "
                    "one on, verified against the origin's own manifest.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    publish.add_argument("dir", metavar="DIR", help="the directory the web server serves")
    publish.add_argument("--layers-dir", metavar="PATH", default=None,
                         help=f"where the layer sidecars and index.json go (default: DIR/{DEFAULT_LAYERS}); "
                              "the configuration serves this directory at /.well-known/swarm-layer/")
    publish.add_argument("--url-prefix", metavar="PATH", type=_url_prefix, default="/",
                         help="the URL path at which the server serves DIR (default: /)")
    publish.add_argument("--server", choices=tuple(config.SERVERS), default="nginx",
                         help="which configuration to print (default: nginx); s3: an upload script instead")
    publish.add_argument("--bucket", metavar="NAME", default=None,
                         help="with --server s3: the bucket the files go to (the script's SWARM_S3_BUCKET overrides "
                              "it)")
    publish.add_argument("--path-style", action="store_true",
                         help="with --server s3: clients reach the files at https://HOST/BUCKET/KEY, so the fields' "
                              "layer paths start with /BUCKET")
    publish.add_argument("--config-dir", metavar="PATH", default=None,
                         help="write the configuration as files there (nginx-http.conf, nginx-server.conf, "
                              "apache.conf) instead of printing it")
    publish.add_argument("--block-size", metavar="auto|SIZE", type=parse_block_size, default=None,
                         help=f"block size of every manifest: a power of two from {format_size(MIN_BLOCK_SIZE)} to "
                              f"{format_size(MAX_BLOCK_SIZE)} (64k is 64Ki), or auto (the default: the proxy's rule "
                              f"by file size, {format_size(MIN_BLOCK_SIZE)} up to "
                              f"{format_size(MIN_BLOCK_SIZE * TARGET_MAX_BLOCKS)}, then at most ~{TARGET_MAX_BLOCKS} "
                              f"blocks, up to {format_size(MAX_BLOCK_SIZE)})")
    publish.add_argument("--min-size", metavar="SIZE", type=parse_size, default=1,
                         help="smaller files get no field (default: 1, every non-empty file; k, M, G: powers of "
                              "1024)")
    publish.add_argument("--hidden", action="store_true", help="publish hidden files and directories too")
    publish.add_argument("--jobs", metavar="N", type=int, default=min(4, os.cpu_count() or 1),
                         help="files hashed at once (default: the CPUs, at most 4)")
    publish.add_argument("--quiet", action="store_true", help="no progress line and no summary on stderr")
    return parser


def main(argv: list[str] | None = None) -> int:
    """publish file manifests from nginx or Apache (`swarmproxy manifest publish DIR`)"""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if (usage := _usage_error(args)) is not None:
        print(f"swarmproxy manifest: {usage}", file=sys.stderr)
        return 2
    try:
        return Run(args).run()
    except PublishError as exc:
        print(f"swarmproxy manifest: {exc}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        return 130


def _usage_error(args: argparse.Namespace) -> str | None:
    if args.jobs < 1:
        return "--jobs must be at least 1"
    if args.server == "s3":
        return s3.bucket_error(args.bucket)
    return "--bucket and --path-style go with --server s3" if args.bucket is not None or args.path_style else None


def _warn(message: str) -> None:
    # A name's bytes that are not UTF-8 print as \udcXX, its control characters (newline, escapes) as "?".
    message = config.printable_name(message.encode("utf-8", "backslashreplace").decode("utf-8"))
    print(f"swarmproxy manifest: warning: {message}", file=sys.stderr)


def _id(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def walk(root: str, *, hidden: bool, skip: set[tuple[int, int]], tally: Tally,
         warn: Callable[[str], None] = _warn) -> Iterator[Found]:
    """The regular files under `root`, depth first in name order; links leaving `root` refused, the
    directories in `skip` (by device and inode) and loops left out."""
    real_root = os.path.realpath(root)
    stack = [("", root, frozenset({_id(root)}))]
    while stack:
        rel_dir, directory, ancestors = stack.pop()
        try:
            with os.scandir(directory) as listing:
                items = sorted(listing, key=lambda item: item.name)
        except OSError as exc:
            warn(f"cannot list {directory}: {exc.strerror or exc}")
            tally.skip("unreadable", failure=True)
            continue
        below = []
        for item in items:
            if not hidden and item.name.startswith("."):
                continue
            rel = f"{rel_dir}/{item.name}" if rel_dir else item.name
            try:
                st = os.stat(item.path)  # follows a link
                link = item.is_symlink()
            except OSError as exc:
                warn(f"skipping {item.path}: {exc.strerror or exc}")
                tally.skip("unreadable", failure=True)
                continue
            if link and not _inside(os.path.realpath(item.path), real_root):
                warn(f"refusing {item.path}: a symbolic link to {os.path.realpath(item.path)}, outside {root}")
                tally.skip("symlinks leaving DIR")
                continue
            if stat.S_ISDIR(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if key not in skip and key not in ancestors:
                    below.append((rel, item.path, ancestors | {key}))
            elif stat.S_ISREG(st.st_mode):
                yield Found(rel, item.path, st.st_size, st.st_mtime_ns)
        stack.extend(reversed(below))


class Progress:
    """One line on stderr, redrawn at most four times a second on a terminal, else a line every 10 s."""

    def __init__(self, total: int, files: int, enabled: bool) -> None:
        self.total, self.files, self.enabled = total, files, enabled
        self.done = self.files_done = 0
        self.tty = sys.stderr.isatty()
        self.started = self.drawn = time.monotonic()
        self.lock = threading.Lock()

    def add(self, n: int) -> None:
        with self.lock:
            self.done += n
            self._maybe_draw()

    def file_done(self) -> None:
        with self.lock:
            self.files_done += 1
            self._maybe_draw()

    def _maybe_draw(self) -> None:
        now = time.monotonic()
        if self.enabled and now - self.drawn >= (0.25 if self.tty else 10.0):
            self.drawn = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        rate = self.done / max(now - self.started, 1e-6)
        line = (f"hashing: {self.files_done}/{self.files} files, {self.done / 1e6:,.1f}/{self.total / 1e6:,.1f} MB"
                f" ({self.done / max(self.total, 1):.0%}), {rate / 1e6:,.1f} MB/s")
        sys.stderr.write(f"\r{line}\x1b[K" if self.tty else line + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self._draw(time.monotonic())
            sys.stderr.write("\n")


def hash_file(found: Found, block_size: int, progress: Progress | None = None,
              stop: threading.Event | None = None) -> tuple[Manifest, list[bytes]]:
    """The manifest and layer of `found`, read in `READ_SIZE` pieces; `Changed` if the file is not the one
    `found` describes, before or after; `OSError` if it cannot be read."""
    with open(found.path, "rb") as handle:
        if _version(os.fstat(handle.fileno())) != (found.size, found.mtime_ns):
            raise Changed("it changed since it was listed")

        def chunks() -> Iterator[bytes]:
            left = found.size
            while left:
                if stop is not None and stop.is_set():
                    raise Changed("stopped")
                chunk = handle.read(min(READ_SIZE, left))
                if not chunk:
                    raise Changed(f"it shrank while it was read ({left} bytes missing)")
                left -= len(chunk)
                if progress is not None:
                    progress.add(len(chunk))
                yield chunk
        manifest, layer = build_manifest(chunks(), found.size, block_size=block_size)
        if _version(os.fstat(handle.fileno())) != (found.size, found.mtime_ns):
            raise Changed("it changed while it was read")
    return manifest, layer


def _version(st: os.stat_result) -> tuple[int, int]:
    return st.st_size, st.st_mtime_ns


def write_atomically(path: str, data: bytes) -> None:
    """`data` at `path`, all or nothing (a temporary file beside it, synced, renamed over it), readable by all:
    the web server's workers read the sidecars. `PublishError` with a clear cause when it cannot be written."""
    directory = os.path.dirname(path) or "."
    try:
        fd, temporary = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    except OSError as exc:
        raise PublishError(_write_failure(path, exc)) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except OSError as exc:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise PublishError(_write_failure(path, exc)) from None


def _write_failure(path: str, exc: OSError) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"disk full: cannot write {path} ({exc.strerror}); free some space and run again"
    return f"cannot write {path}: {exc.strerror or exc}"


def make_served_dirs(path: str) -> None:
    """`path` and its missing parents, each readable by all (the web server's workers), whatever the umask."""
    missing = []
    while not os.path.isdir(path) and path != os.path.dirname(path):
        missing.append(path)
        path = os.path.dirname(path)
    for directory in reversed(missing):
        try:
            os.mkdir(directory)
            os.chmod(directory, 0o755)
        except FileExistsError:
            continue
        except OSError as exc:
            raise PublishError(f"cannot create {directory}: {exc.strerror or exc}") from None


def read_layer(path: str, manifest: Manifest) -> list[bytes] | None:
    """The sidecar at `path` if it is `manifest`'s layer (length and hashes checked), else None."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(manifest.num_blocks * HASH_SIZE + 1)
    except OSError:
        return None
    layer = [raw[i:i + HASH_SIZE] for i in range(0, len(raw), HASH_SIZE)]
    try:
        if len(raw) != manifest.num_blocks * HASH_SIZE:
            return None
        manifest.verify_layer(layer)
    except HashMismatch:
        return None
    return layer


class Run:
    """One `manifest publish`: walk, reuse or hash, write sidecars, index, configuration, summary."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tally = Tally()
        self.started = time.monotonic()
        self.root = os.path.abspath(args.dir)
        self.layers = os.path.abspath(args.layers_dir or os.path.join(self.root, DEFAULT_LAYERS))
        self.index_path = os.path.join(self.layers, config.INDEX_NAME)
        self.s3 = args.server == "s3"
        # What a field names as its layer, and how many hashes it may carry inline instead (S3: 2 KB of metadata).
        self.layer_url = (f"/{args.bucket}" if args.path_style else "") + LAYER_PREFIX
        self.inline = METADATA_INLINE_HASHES if self.s3 else INLINE_HASHES

    # -- the run ------------------------------------------------------------------------------------------------

    def run(self) -> int:
        if not os.path.isdir(self.root):
            what = "is not a directory" if os.path.exists(self.root) else "does not exist"
            raise PublishError(f"{self.args.dir} {what}", 2)
        if (reason := config.unusable_layers_dir(self.layers)) is not None:
            raise PublishError(f"cannot use {self.layers} as --layers-dir: {reason}", 2)
        make_served_dirs(self.layers)
        old = self.load_index()
        skip = {key for key in (_id(self.layers), self.args.config_dir and _id(self.args.config_dir)) if key}
        entries: dict[str, dict] = {}
        todo: list[tuple[Found, int]] = []
        for found in walk(self.root, hidden=self.args.hidden, skip=skip, tally=self.tally):
            block_size = self.plan(found)
            if block_size is None:
                continue
            record = self.reusable(old.get(found.rel), found, block_size)
            if record is not None:
                entries[found.rel] = record
                self.count(record, written=False)
            else:
                todo.append((found, block_size))
        self.hash_all(todo, entries)
        self.finish(old, dict(sorted(entries.items())))
        return 1 if self.tally.failed else 0

    def plan(self, found: Found) -> int | None:
        """The block size `found` is published with, None when it is not published."""
        if found.size < max(self.args.min_size, 1):
            self.tally.skip("smaller than --min-size" if found.size else "empty")
            return None
        if (reason := config.unusable_path(self.url(found.rel))
                or (s3.unusable_key(self.key(found.rel)) if self.s3 else None)) is not None:
            _warn(f"skipping {found.path}: {reason}")
            self.tally.skip("unnameable in a server configuration")
            return None
        block_size = self.args.block_size or choose_block_size(found.size)
        if block_count(found.size, block_size) > MAX_BLOCKS:
            _warn(f"skipping {found.path}: more than {MAX_BLOCKS} blocks of {block_size} bytes; "
                  "use a larger --block-size (or auto)")
            self.tally.skip("too many blocks for --block-size")
            return None
        return block_size

    def url(self, rel: str) -> str:
        return f"{self.args.url_prefix}/{rel}"

    def key(self, rel: str) -> str:
        """The S3 object key of the file at `rel`: its URL path under the bucket."""
        return self.url(rel).lstrip("/")

    def reusable(self, record: dict | None, found: Found, block_size: int) -> dict | None:
        """The index's record of `found` if the file and its sidecar are as recorded then."""
        if not isinstance(record, dict) or (record.get("size"), record.get("mtime_ns"), record.get("block_size")) \
                != (found.size, found.mtime_ns, block_size) or not isinstance(record.get("header"), str):
            return None
        try:
            published = parse_header(record["header"])
        except ManifestError:
            return None
        if (published.size, published.block_size) != (found.size, block_size):
            return None
        if published.hashes is not None and len(published.hashes) > self.inline:  # written for another --server
            return None
        if published.layer_path is not None:
            if published.layer_path != self.layer_url + published.root.hex() or \
                    read_layer(self.sidecar(published.root.hex()), published.manifest()) is None:
                return None
        return record

    def sidecar(self, root_hex: str) -> str:
        return os.path.join(self.layers, root_hex)

    def hash_all(self, todo: list[tuple[Found, int]], entries: dict[str, dict]) -> None:
        """Hash `todo`, `--jobs` files at once, writing each long layer as it comes; a write failure stops all."""
        total = sum(found.size for found, _ in todo)
        progress = Progress(total, len(todo), not self.args.quiet and
                            (total >= PROGRESS_BYTES or len(todo) >= PROGRESS_FILES))
        stop = threading.Event()
        pending: dict[concurrent.futures.Future, tuple[Found, int]] = {}
        queue = iter(todo)
        with concurrent.futures.ThreadPoolExecutor(self.args.jobs, thread_name_prefix="hash") as pool:
            try:
                while True:
                    while len(pending) < 2 * self.args.jobs and (job := next(queue, None)) is not None:
                        pending[pool.submit(hash_file, job[0], job[1], progress, stop)] = job
                    if not pending:
                        break
                    done, _ = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
                    for future in done:
                        found, block_size = pending.pop(future)
                        progress.file_done()
                        record = self.hashed(found, block_size, future)
                        if record is not None:
                            entries[found.rel] = record
            except BaseException:
                stop.set()
                for future in pending:
                    future.cancel()
                raise
            finally:
                progress.close()

    def hashed(self, found: Found, block_size: int, future: concurrent.futures.Future) -> dict | None:
        try:
            manifest, layer = future.result()
        except Changed as exc:
            _warn(f"skipping {found.path}: {exc}; run again when it is complete")
            self.tally.skip("changed while read", failure=True)
            return None
        except OSError as exc:
            _warn(f"skipping {found.path}: {exc.strerror or exc}")
            self.tally.skip("unreadable", failure=True)
            return None
        self.tally.hashed += found.size
        root_hex = manifest.root.hex()
        record = {"size": found.size, "mtime_ns": found.mtime_ns, "block_size": block_size, "root": root_hex,
                  "header": format_header(manifest, layer, self.layer_url + root_hex, inline=self.inline)}
        written = False
        if len(layer) > self.inline and read_layer(self.sidecar(root_hex), manifest) is None:
            write_atomically(self.sidecar(root_hex), b"".join(layer))
            written = True
        self.count(record, written=written)
        return record

    def count(self, record: dict, *, written: bool) -> None:
        self.tally.files += 1
        self.tally.bytes += record["size"]
        if "layer=" in record["header"]:
            self.tally.sidecars.add(record["root"])
            if written:
                self.tally.written.add(record["root"])

    # -- index, pruning, configuration, summary ----------------------------------------------------------------

    def load_index(self) -> dict[str, dict]:
        try:
            with open(self.index_path, encoding="utf-8") as handle:
                data = json.load(handle)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            _warn(f"ignoring {self.index_path} ({exc}): every file is hashed again")
            return {}
        if not isinstance(data, dict) or data.get("format") != INDEX_FORMAT or not isinstance(data.get("files"), dict):
            _warn(f"ignoring {self.index_path}: not an index of this version; every file is hashed again")
            return {}
        if data.get("dir") != self.root:
            raise PublishError(f"{self.layers} holds the layers of {data.get('dir')!r}, not of {self.root}: give each "
                               f"tree its own --layers-dir (or delete {self.index_path} to start this one afresh)", 2)
        return data["files"]

    def finish(self, old: dict[str, dict], entries: dict[str, dict]) -> None:
        index = {"format": INDEX_FORMAT, "dir": self.root, "url_prefix": self.args.url_prefix or "/",
                 "files": entries}
        write_atomically(self.index_path, json.dumps(index, indent=1).encode("ascii") + b"\n")
        self.prune(old, entries)
        if self.s3:
            uploads = [s3.Upload(os.path.join(self.root, rel), self.key(rel), record["header"])
                       for rel, record in entries.items()]
            files = {config.S3_SCRIPT: s3.script(uploads, self.layers, self.args.bucket, self.root)}
        else:
            files = config.render(self.args.server, [config.Entry(self.url(rel), record["header"])
                                                     for rel, record in entries.items()], self.layers, self.root)
        if self.args.config_dir:
            try:
                os.makedirs(self.args.config_dir, exist_ok=True)
            except OSError as exc:
                raise PublishError(f"cannot create {self.args.config_dir}: {exc.strerror or exc}") from None
            for name, text in files.items():
                write_atomically(os.path.join(self.args.config_dir, name), text.encode("utf-8", "surrogateescape"))
        else:
            sys.stdout.flush()
            text = files[config.S3_SCRIPT] if self.s3 else config.printable(files)  # a script: its #! line first
            sys.stdout.buffer.write(text.encode("utf-8", "surrogateescape"))
            sys.stdout.flush()
        if not self.args.quiet:
            print(self.summary(), file=sys.stderr)

    def prune(self, old: dict[str, dict], entries: dict[str, dict]) -> None:
        """Remove the sidecars the last run wrote that no file needs now (each named by its root: only ours)."""
        needed = {record["root"] for record in entries.values()}
        stale = {record.get("root") for record in old.values() if isinstance(record, dict)} - needed
        for root_hex in sorted(r for r in stale if isinstance(r, str) and _HEX_NAME.fullmatch(r)):
            try:
                os.unlink(self.sidecar(root_hex))
                self.tally.removed += 1
            except FileNotFoundError:
                pass
            except OSError as exc:
                _warn(f"cannot remove the stale sidecar {self.sidecar(root_hex)}: {exc.strerror or exc}")

    def summary(self) -> str:
        tally = self.tally
        text = (f"swarmproxy manifest: {tally.files} file{'' if tally.files == 1 else 's'} published "
                f"({tally.bytes / 1e6:,.1f} MB) from {self.root}"
                f" in {time.monotonic() - self.started:.1f} s: {tally.hashed / 1e6:,.1f} MB hashed, layer sidecars"
                f" {len(tally.written)} written, {len(tally.sidecars - tally.written)} kept, {tally.removed} removed")
        if tally.skipped:
            text += "; skipped: " + ", ".join(f"{n} {why}" for why, n in sorted(tally.skipped.items()))
        if self.args.config_dir:
            text += f"; configuration in {self.args.config_dir}"
        return text
