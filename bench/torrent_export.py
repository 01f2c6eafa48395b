"""What exporting a content's v2 torrent costs: the piece layers merged up from the block layer, no byte re-read.

A file of `--size` bytes (1 GiB by default) is hashed once into a manifest and block layer at each block size
(the manifest's own choice for that size, and the smallest, 16 KiB: the most hashes to merge), then
`swarm.content.torrent.torrent_of` is timed over `--repeat` runs; then a hybrid export (`--hybrid`: the v1 part's
SHA-1 pass reads the file) once, and libtorrent's `create_torrent` on the same file, which reads and hashes every
byte, beside it.

    python -m bench.torrent_export [--size BYTES] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import tempfile
import time

from swarm.content.manifest import MIN_BLOCK_SIZE, build_manifest, choose_block_size
from swarm.content.sizes import parse_size
from swarm.content.torrent import PIECE_LENGTH, torrent_of, v1_pieces

CHUNK = 8 * 1024 * 1024


def _chunks(path: pathlib.Path):
    with path.open("rb") as file:
        while chunk := file.read(CHUNK):
            yield chunk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="1G", help="the file's size (default 1G)")
    parser.add_argument("--repeat", type=int, default=20, help="exports timed per block size (default 20)")
    args = parser.parse_args()
    size = parse_size(args.size)
    with tempfile.TemporaryDirectory() as directory:
        path = pathlib.Path(directory) / "content"
        with path.open("wb") as file:
            for offset in range(0, size, CHUNK):
                file.write(os.urandom(min(CHUNK, size - offset)))
        print(f"file: {size:,} bytes; piece length {PIECE_LENGTH:,}")
        for block_size in sorted({choose_block_size(size), MIN_BLOCK_SIZE}, reverse=True):
            manifest, layer = build_manifest(_chunks(path), size, block_size=block_size)
            times = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                torrent = torrent_of(manifest, layer)
                times.append(time.perf_counter() - started)
            print(f"export, blocks of {block_size:>9,} B ({len(layer):>6,} hashes): median "
                  f"{statistics.median(times) * 1000:7.2f} ms, max {max(times) * 1000:7.2f} ms "
                  f"(info-hash {torrent.info_hash.hex()[:16]}, {len(torrent.data):,} B)")
        started = time.perf_counter()
        v1 = v1_pieces(_chunks(path))
        hybrid = torrent_of(manifest, layer, v1=v1)
        print(f"hybrid export (--hybrid: one SHA-1 pass reading the file): {time.perf_counter() - started:.2f} s "
              f"(v1 info-hash {hybrid.info_hash_v1.hex()[:16] if hybrid.info_hash_v1 else None})")
        try:
            import libtorrent
        except ImportError:
            print("libtorrent is not installed: its create_torrent is not timed")
            return
        started = time.perf_counter()
        creator = libtorrent.create_torrent(libtorrent.list_files(str(path)), PIECE_LENGTH,
                                            libtorrent.create_torrent.v2_only)
        libtorrent.set_piece_hashes(creator, directory)
        creator.generate()
        print(f"libtorrent create_torrent (reads and hashes the file): {time.perf_counter() - started:.2f} s")


if __name__ == "__main__":
    main()
