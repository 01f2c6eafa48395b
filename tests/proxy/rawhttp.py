"""A deliberately small HTTP/1.1 client over raw sockets, so tests control every byte they send and
see every byte they get (framing, truncation, connection close)."""

from __future__ import annotations

import asyncio
import dataclasses


@dataclasses.dataclass
class RawResponse:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes
    complete: bool  # False when the connection ended before the framing said the body was over
    version: str = "HTTP/1.1"  # as the status line says it

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None

    def all(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key.lower() == name.lower()]


class RawConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, address: str) -> RawConnection:
        host, port = address.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 20)
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def closed_by_peer(self) -> bool:
        """True when the server closed the connection (EOF, or a reset)."""
        try:
            return await self.reader.read(1) == b""
        except ConnectionError:
            return True

    async def response(self, *, head_request: bool = False) -> RawResponse:
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        version, status, *reason = lines[0].split(" ", 2)
        headers = []
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers.append((name.strip(), value.strip()))
        response = RawResponse(int(status), reason[0] if reason else "", headers, b"", True, version)
        code = response.status
        if head_request or code in (204, 304) or 100 <= code < 200:
            return response
        length = response.header("Content-Length")
        if response.header("Transfer-Encoding") == "chunked":
            await self._read_chunked(response)
        elif length is not None:
            try:
                response.body = await self.reader.readexactly(int(length))
            except asyncio.IncompleteReadError as exc:
                response.body, response.complete = exc.partial, False
        else:
            response.body = await self.reader.read()
        return response

    async def _read_chunked(self, response: RawResponse) -> None:
        parts = []
        try:
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")
                    break
                parts.append(await self.reader.readexactly(size))
                await self.reader.readexactly(2)
        except (asyncio.IncompleteReadError, ValueError):
            response.complete = False
        response.body = b"".join(parts)

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except ConnectionError:
            pass


async def request(address: str, data: bytes, **kwargs) -> RawResponse:
    connection = await RawConnection.open(address)
    try:
        await connection.send(data)
        return await connection.response(**kwargs)
    finally:
        await connection.close()
