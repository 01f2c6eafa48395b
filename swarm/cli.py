"""`swarmproxy swarm ...`: the block engine's commands for people and scripts.

    swarmproxy swarm manifest FILE   print {"root": HEX, "size": N, "block_size": N}
    swarmproxy swarm seed FILE       serve FILE to peers until interrupted
    swarmproxy swarm get ROOT --peer HOST:PORT -o OUT   fetch content by its root from peers

`proxy.cli` registers these under its `swarm` command (proxy may import swarm, never the reverse).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import os
import pathlib
import signal
import sys
import time
from typing import IO

from swarm.content.manifest import MAX_BLOCK_SIZE, MIN_BLOCK_SIZE, READ_SIZE, build_manifest, choose_block_size
from swarm.content.merkle import HASH_SIZE
from swarm.content.sizes import format_size, parse_block_size, parse_rate
from swarm.errors import SwarmError
from swarm.net.transport import Transport
from swarm.service.node import FETCH_STALL_TIMEOUT  # proxy.config, on every `swarmproxy` path, imports it anyway


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    swarm = subparsers.add_parser(
        "swarm", help="block engine commands (manifests, seeding, fetching from peers)",
        description="Commands of the block engine.",
    )
    commands = swarm.add_subparsers(dest="swarm_command", metavar="SUBCOMMAND", required=True)
    manifest = commands.add_parser(
        "manifest", help="print a file's content root, size and block size as JSON",
        description="Hash FILE as the block engine does (SHA-256 merkle tree over 16 KiB leaves, the same "
                    "root as BitTorrent v2's 'pieces root') and print "
                    '{"root": HEX, "size": N, "block_size": N}.',
    )
    manifest.add_argument("file", metavar="FILE", help="the file to hash")
    manifest.add_argument("--block-size", type=parse_block_size, default=None, metavar="SIZE",
                          help=f"block size, a power of two from {format_size(MIN_BLOCK_SIZE)} to "
                               f"{format_size(MAX_BLOCK_SIZE)}, e.g. 64k (k, M: powers of 1024; default: auto, "
                               "chosen from the size)")
    manifest.set_defaults(swarm_handler=_manifest)

    seed = commands.add_parser(
        "seed", help="serve a file to peers until interrupted",
        description="Hash FILE, store it in the data dir and serve its blocks to peers until interrupted "
                    "(Ctrl-C or SIGTERM). Peers fetch it with 'swarmproxy swarm get ROOT --peer HOST:PORT'.",
    )
    seed.add_argument("file", metavar="FILE", help="the file to serve")
    _common(seed)
    seed.add_argument("--listen", default="127.0.0.1:0", metavar="HOST:PORT",
                      help="where peers connect; port 0 picks a free one (default: 127.0.0.1:0)")
    seed.add_argument("--ready-file", default=None, metavar="FILE",
                      help='once serving, write {"peer": "HOST:PORT", "root": HEX} here')
    seed.add_argument("--upload-rate", type=parse_rate, default=None, metavar="BYTES_PER_S",
                      help="upload limit for all peers together, bytes/s on the wire (TCP/IP headers counted), "
                           "e.g. 1.25M (k, M: powers of 1000, Ki, Mi: of 1024; default: unlimited)")
    seed.set_defaults(swarm_handler=_run_async(_seed))

    get = commands.add_parser(
        "get", help="fetch content by its root from peers",
        description="Fetch the content whose root is ROOT from the given peers: the manifest is asked for "
                    "and checked against ROOT, every block against the manifest's hashes, then the bytes are "
                    "written to OUT. The blocks go into the data dir's block store first (an interrupted get "
                    "resumes from there), whose file then becomes OUT: the store keeps no second copy. "
                    "Exits 1 with a one-line reason when it cannot.",
    )
    get.add_argument("root", metavar="ROOT", help="content root, 64 hex digits (from 'swarm manifest')")
    get.add_argument("--peer", action="append", required=True, metavar="HOST:PORT",
                     help="a peer to fetch from (repeatable)")
    get.add_argument("-o", "--output", required=True, metavar="OUT", help="file to write ('-' for stdout)")
    _common(get)
    get.add_argument("--timeout", type=float, default=FETCH_STALL_TIMEOUT, metavar="SECONDS",
                     help=f"give up when no block arrives for this long (default: {FETCH_STALL_TIMEOUT:g})")
    get.set_defaults(swarm_handler=_run_async(_get))


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--transport", choices=("tcp", "quic"), default="tcp",
                        help="peer transport (default: tcp)")
    parser.add_argument("--data-dir", default=None, metavar="DIR",
                        help="block store location (default: $XDG_DATA_HOME/swarmproxy)")


def run(args: argparse.Namespace) -> int:
    return args.swarm_handler(args)


def _run_async(handler):
    def run_it(args: argparse.Namespace) -> int:
        _keep_freed_memory()
        try:
            with asyncio.Runner(loop_factory=_loop_factory()) as runner:
                return runner.run(handler(args))
        except KeyboardInterrupt:
            return 130

    return run_it


def _keep_freed_memory() -> None:
    """Let glibc reuse freed block buffers instead of unmapping them.

    Every received block lands in a new buffer of up to 4 MiB. By default glibc serves sizes past its mmap
    threshold with fresh mappings and returns freed heap tops to the kernel, so each block costs page faults
    and the kernel zeroing the pages again (a quarter of `swarm get`'s CPU with four seeds). Raising both
    thresholds keeps the few MiB in flight mapped and reused. Best effort: only glibc has `mallopt`.
    """
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 32 * 1024 * 1024)  # glibc's maximum (on 64-bit)
    mallopt(m_trim_threshold, 256 * 1024 * 1024)


def _loop_factory():
    """uvloop when installed (less CPU per read and per callback than asyncio's loop), else the default."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _fail(message: str, code: int = 1) -> int:
    print(f"swarmproxy: {message}", file=sys.stderr)
    return code


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def _node(args: argparse.Namespace, **kwargs):
    from swarm.service.node import SwarmNode
    from swarm.store.disk import DiskBlockStore

    data_dir = pathlib.Path(args.data_dir) if args.data_dir else default_data_dir()
    store = DiskBlockStore(data_dir / "blocks")
    transport: Transport
    if args.transport == "quic":
        from swarm.net.quic import QuicTransport
        transport = QuicTransport()
    else:
        from swarm.net.tcp import TcpTransport
        transport = TcpTransport()
    return SwarmNode(store, transport, **kwargs)


def default_data_dir() -> pathlib.Path:
    """Where swarmproxy keeps its state unless told otherwise: $XDG_DATA_HOME/swarmproxy, else (unset or empty, as
    the XDG base directory spec says) ~/.local/share/swarmproxy. The one definition: `run` (proxy.config), `swarm
    seed|get` and the cluster agent (its `cluster` directory under it) all default to it."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return pathlib.Path(base) / "swarmproxy"


async def _seed(args: argparse.Namespace) -> int:
    try:
        host, port = _address(args.listen)
        node = _node(args, upload_rate=args.upload_rate)
    except (ValueError, SwarmError) as exc:
        return _fail(str(exc), 2)
    try:
        manifest = await node.seed_file(args.file)
        address = await node.start(host, port)
    except OSError as exc:
        await node.close()
        return _fail(f"cannot seed {args.file}: {exc.strerror or exc}")
    except SwarmError as exc:
        await node.close()
        return _fail(f"cannot seed {args.file}: {exc}")
    peer = f"{address[0]}:{address[1]}"
    print(f"seeding {args.file} ({manifest.size} bytes) as {manifest.root.hex()} on {peer} "
          f"over {args.transport}", file=sys.stderr)
    if args.ready_file:
        tmp = f"{args.ready_file}.tmp{os.getpid()}"
        pathlib.Path(tmp).write_text(json.dumps({"peer": peer, "root": manifest.root.hex()}) + "\n")
        os.replace(tmp, args.ready_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await node.close()
    return 0


async def _get(args: argparse.Namespace) -> int:
    from swarm.errors import FetchFailed

    try:
        root = bytes.fromhex(args.root)
        if len(root) != HASH_SIZE:
            raise ValueError
    except ValueError:
        return _fail(f"ROOT must be 64 hex digits, got {args.root!r}", 2)
    try:
        peers = [_address(p) for p in args.peer]
        node = _node(args)
    except (ValueError, SwarmError) as exc:
        return _fail(str(exc), 2)
    tmp = None
    try:
        manifest = await node.fetch_manifest(root, peers)
        progress = _Progress(manifest.size)
        if args.output != "-":
            tmp = f"{args.output}.part"
        output = _Output(node.store, manifest, tmp)
        with output:
            async for chunk in node.fetch(manifest, peers, stall_timeout=args.timeout, window=0,
                                          into_store=output.into_store):
                progress.advance(output.write(chunk))
        output.finish()
        if tmp:
            os.replace(tmp, args.output)
            tmp = None
        progress.done()
        return 0
    except FetchFailed as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"cannot write {args.output}: {exc.strerror or exc}")
    except SwarmError as exc:  # the store lost blocks it had taken (they are checked again when read back)
        return _fail(f"cannot write {args.output}: {exc}")
    finally:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        await node.close()


class _Output:
    """Where `swarm get` puts the bytes: written as they come, or taken whole from the block store.

    A download that the store did not hold complete already is written there anyway (that is what lets an
    interrupted `get` resume), so writing it to OUT as well would write every byte twice. Instead the fetch
    runs `into_store` and the store's data file becomes OUT at the end (`DiskBlockStore.move_out`, a
    rename); the entry leaves the store. Should the store refuse a block (disk full), what it holds so far
    is copied out (checked against the hashes again) and from there on the bytes are written as they come.
    """

    def __init__(self, store, manifest, path: str | None) -> None:
        self.store, self.manifest, self.path = store, manifest, path
        root = manifest.root
        self.into_store = (path is not None and manifest.size > 0 and hasattr(store, "move_out")
                           and not (root in store and store.complete(root)))
        self.from_store = self.into_store  # until the store refuses a block
        self.handle: IO[bytes] | None = None if self.into_store else open(path, "wb") if path else None
        self.block = 0

    def __enter__(self) -> _Output:
        return self

    def __exit__(self, *exc_info) -> None:
        if self.handle is not None:
            self.handle.close()

    def write(self, chunk: bytes) -> int:
        """Take the next block's chunk (b"" when it is in the store); returns the bytes it stands for."""
        block, self.block = self.block, self.block + 1
        root = self.manifest.root
        if self.into_store and not chunk:  # in the store
            if self.from_store:
                return self.manifest.block_span(block)[1]
            chunk = self.store.read_block(root, block, verify=True)
        elif self.from_store:  # the store refused this block: write everything ourselves from here
            self.from_store = False
            assert self.path is not None  # (into the store only with a path)
            self.handle = handle = open(self.path, "wb")
            for earlier in range(block):
                handle.write(self.store.read_block(root, earlier, verify=True))
        (self.handle or sys.stdout.buffer).write(chunk)
        return len(chunk)

    def finish(self) -> None:
        if self.handle is not None:
            self.handle.close()
        if self.from_store:
            self.store.move_out(self.manifest.root, self.path)


class _Progress:
    """A one-line progress bar on a terminal; silent when stderr is not one (scripts, logs)."""

    def __init__(self, total: int) -> None:
        self.total, self.done_bytes = total, 0
        self.enabled = sys.stderr.isatty()
        self.started = time.monotonic()
        self.shown = 0.0

    def advance(self, n: int) -> None:
        self.done_bytes += n
        now = time.monotonic()
        if self.enabled and now - self.shown > 0.1:
            self.shown = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        fraction = self.done_bytes / self.total if self.total else 1.0
        rate = self.done_bytes / max(now - self.started, 1e-6)
        bar = "#" * int(fraction * 30)
        sys.stderr.write(f"\r[{bar:<30}] {fraction:6.1%} {self.done_bytes / 1e6:9.1f} MB {rate / 1e6:7.1f} MB/s")
        sys.stderr.flush()

    def done(self) -> None:
        if self.enabled:
            self._draw(time.monotonic())
            sys.stderr.write("\n")


def _chunks(handle, size: int):
    left = size
    while left > 0:
        chunk = handle.read(min(READ_SIZE, left))
        if not chunk:
            raise OSError(f"the file shrank while it was read ({left} bytes missing)")
        left -= len(chunk)
        yield chunk


def _manifest(args: argparse.Namespace) -> int:
    try:
        with open(args.file, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            block_size = args.block_size or choose_block_size(size)
            manifest, _layer = build_manifest(_chunks(handle, size), size, block_size=block_size)
    except OSError as exc:
        print(f"swarmproxy: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except (ValueError, SwarmError) as exc:  # e.g. more blocks of --block-size than a manifest may have
        print(f"swarmproxy: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"root": manifest.root.hex(), "size": manifest.size, "block_size": manifest.block_size}))
    return 0
