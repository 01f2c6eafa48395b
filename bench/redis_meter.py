"""Bytes to and from redis by what asked for them: which `Coord` call, and whose (an agent's or the pusher's).

A bench installs it (`RedisMeter.install`) in a process that runs many coordinators at once: it wraps redis-py's
asyncio connection (every command's RESP request, as sent; every reply, as read) and `cluster.coord.Coord`'s calls,
and files each request and reply under the call it belongs to (a context variable: each agent's reconcile is its own
task, and redis-py reads a reply in the task that sent the command). A reply's size is its RESP2 encoding
re-counted from the parsed value, which is what redis sent (`total_net_output_bytes` counts the same bytes, and
`bench.cluster_redis_load` reports both). TLS records, TCP and IP headers are not in either: per round trip they
add a few dozen bytes each way (`round_trips`, the requests sent, tells how many).
"""

from __future__ import annotations

import contextvars
import functools
from collections import Counter
from collections.abc import Iterator
from typing import Any

import redis.asyncio.connection as connection

from cluster.coord import Coord

__all__ = ["RedisMeter", "resp_size"]

# The calls a coordinator makes; a call made inside another (`server_id` calls `server`) is filed under the outer.
CALLS = ("server", "server_id", "ping", "put_agent", "agents", "put_transfer", "transfers", "cancel", "cancelled",
         "forget_transfer", "put_member", "scope", "members", "holders", "claim", "refresh", "announce", "withdraw",
         "providers", "wake_up")
_call: contextvars.ContextVar[str] = contextvars.ContextVar("redis_meter_call", default="")
whose: contextvars.ContextVar[str] = contextvars.ContextVar("redis_meter_whose", default="agent")


def resp_size(value: Any) -> int:
    """Bytes of `value`'s RESP2 encoding, as redis-py parsed it (bulk strings are bytes, status replies str)."""
    if value is None:
        return 5  # $-1\r\n
    if isinstance(value, bytes):
        return len(value) + len(str(len(value))) + 5  # $N\r\n ... \r\n
    if isinstance(value, bool) or isinstance(value, int):
        return len(str(int(value))) + 3  # :N\r\n
    if isinstance(value, str):
        return len(value.encode()) + 3  # +OK\r\n
    if isinstance(value, (list, tuple)):
        return len(str(len(value))) + 3 + sum(resp_size(v) for v in value)
    if isinstance(value, BaseException):
        return len(str(value).encode()) + 3  # -ERR ...\r\n
    return len(str(value).encode()) + 3


class RedisMeter:
    """Counts, by (whose, call): bytes sent to redis, bytes read from it, requests (round trips) and replies."""

    def __init__(self) -> None:
        self.sent: Counter[tuple[str, str]] = Counter()
        self.read: Counter[tuple[str, str]] = Counter()
        self.requests: Counter[tuple[str, str]] = Counter()
        self.replies: Counter[tuple[str, str]] = Counter()
        self._undo: list[tuple[object, str, object]] = []

    def _label(self) -> tuple[str, str]:
        return whose.get(), _call.get() or "other"  # "other": the wake-up channel's messages, subscriptions

    def install(self) -> RedisMeter:
        meter = self
        conn = connection.AbstractConnection
        send, read = conn.send_packed_command, conn.read_response

        async def send_packed_command(self, command, check_health=True):
            chunks = [command] if isinstance(command, (bytes, str)) else list(command)
            label = meter._label()
            meter.sent[label] += sum(len(c.encode() if isinstance(c, str) else c) for c in chunks)
            meter.requests[label] += 1
            return await send(self, chunks, check_health)

        async def read_response(self, *args, **kwargs):
            value = await read(self, *args, **kwargs)
            label = meter._label()
            meter.read[label] += resp_size(value)
            meter.replies[label] += 1
            return value

        self._patch(conn, "send_packed_command", send_packed_command)
        self._patch(conn, "read_response", read_response)
        for name in CALLS:
            self._patch(Coord, name, _labelled(name, getattr(Coord, name)))
        return self

    def _patch(self, owner: object, name: str, value: object) -> None:
        self._undo.append((owner, name, owner.__dict__[name]))  # type: ignore[attr-defined]
        setattr(owner, name, value)

    def uninstall(self) -> None:
        for owner, name, value in reversed(self._undo):
            setattr(owner, name, value)
        self._undo.clear()

    def snapshot(self) -> dict[str, Counter[tuple[str, str]]]:
        return {"sent": Counter(self.sent), "read": Counter(self.read), "requests": Counter(self.requests),
                "replies": Counter(self.replies)}

    def since(self, before: dict[str, Counter[tuple[str, str]]]) -> dict[str, Counter[tuple[str, str]]]:
        now = self.snapshot()
        return {kind: now[kind] - before[kind] for kind in now}


def per(counts: dict[str, Counter[tuple[str, str]]], divisor: float) -> dict[str, dict[str, float]]:
    """{whose/call: {sent, read, requests}} per `divisor` (agent periods), largest read first."""
    labels: Iterator[tuple[str, str]] = iter(set(counts["sent"]) | set(counts["read"]))
    rows = {f"{w}/{c}": {"sent": round(counts["sent"][(w, c)] / divisor, 1),
                         "read": round(counts["read"][(w, c)] / divisor, 1),
                         "requests": round(counts["requests"][(w, c)] / divisor, 2)} for w, c in labels}
    return dict(sorted(rows.items(), key=lambda item: -item[1]["read"]))


def _labelled(name: str, method):
    @functools.wraps(method)
    async def call(self, *args, **kwargs):
        if _call.get():
            return await method(self, *args, **kwargs)
        token = _call.set(name)
        try:
            return await method(self, *args, **kwargs)
        finally:
            _call.reset(token)
    return call
