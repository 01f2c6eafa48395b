"""`swarmproxy swarm ...`: the block engine's commands for people and scripts.

    swarmproxy swarm manifest FILE   print {"root": HEX, "size": N, "block_size": N}

`proxy.cli` registers these under its `swarm` command (proxy may import swarm, never the reverse).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .errors import SwarmError
from .manifest import build_manifest, choose_block_size

READ_SIZE = 1 << 20


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
    manifest.add_argument("--block-size", type=int, default=None, metavar="BYTES",
                          help="block size, a power of two >= 16384 (default: chosen from the size)")
    manifest.set_defaults(swarm_handler=_manifest)


def run(args: argparse.Namespace) -> int:
    return args.swarm_handler(args)


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
    except (ValueError, SwarmError) as exc:  # e.g. a block size that is not a power of two
        print(f"swarmproxy: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"root": manifest.root.hex(), "size": manifest.size, "block_size": manifest.block_size}))
    return 0
