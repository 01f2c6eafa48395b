"""Waiting, by polling, for a condition of an embedded libtorrent session: `until`, and `checked` (a torrent just added
to seed takes peers)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import libtorrent as lt


async def until(condition: Callable[[], object], what: str) -> None:
    """Poll `condition` until it holds; fail after 30 s, saying `what` was awaited."""
    try:
        async with asyncio.timeout(30):
            while not condition():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"not within 30 s: {what}") from None


async def checked(handle: Any) -> None:
    """Until libtorrent has checked the resume data of the torrent of `handle` (on its disk thread), it refuses every
    peer ("torrent is not ready to accept peers"): 23 of 150 handshakes sent at once met that on a loaded machine."""
    await until(lambda: handle.status().state == lt.torrent_status.seeding, "the torrent checked")
