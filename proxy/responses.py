"""Responses the proxy writes itself (errors, the admin API, CONNECT's 200) carry no `Server` field.

aiohttp fills in `Server: Python/3.x aiohttp/3.x` by default: it tells a client nothing it needs, names
exact versions to anyone probing the port, and made our own answers look like some other server's.
Relayed responses keep the origin's `Server` (proxy.relay.RelayedResponse).
"""

from __future__ import annotations

from aiohttp import web


class OwnStreamResponse(web.StreamResponse):
    async def _prepare_headers(self) -> None:
        await super()._prepare_headers()
        self.headers.popall("Server", None)


class OwnResponse(web.Response):
    async def _prepare_headers(self) -> None:
        await super()._prepare_headers()
        self.headers.popall("Server", None)
