"""The rules every plugin applies the same way, whatever the server framework (aiohttp, ASGI): plain functions of
statuses, methods, header values and paths, so that the two plugins cannot drift apart and one table tests them.

- `may_carry`: may this response carry the `Swarm-Manifest` field of the representation the resolver named?
- `may_hold`: may a hinted response's body wait for its client to leave (`Publisher.hold_for`)?
- `layer_answer`: what the layer endpoint (`LAYER_PREFIX` + root hex) answers.
- `publish`: the manifest of a resolved representation, or None (logged) when its bytes cannot be had.
- `file_under` / `file_representation`: a URL path mapped to a file under a directory, never outside it, and that
  file as a `Representation` whose validator is the ETag the server in front computes from the same `stat`
  (`aiohttp_etag`, `starlette_etag`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import pathlib
import stat

from swarm.content.manifest import READ_SIZE

from .errors import NotPublishable
from .publisher import LAYER_PREFIX, Published, Publisher, Representation

log = logging.getLogger("swarmproxy.server_plugin")

METHODS = ("GET", "HEAD")  # the only methods whose answer is the representation's bytes (or their head)
STATUSES = (200, 206)
LAYER_TYPE = "application/octet-stream"
# A layer is named by its root: its bytes never change, so any cache may keep it.
LAYER_CACHE_CONTROL = "public, max-age=86400"


def is_strong(etag: str | None) -> bool:
    """A strong entity tag (RFC 9110 §8.8.3): quoted, no `W/`. Only a strong one names exact bytes."""
    return etag is not None and len(etag) >= 2 and etag.startswith('"') and etag.endswith('"')


def _content_range_total(value: str) -> int | None:
    """N of `bytes a-b/N`, None for anything else (`*`, multipart, nonsense)."""
    unit, _, rest = value.strip().partition(" ")
    total = rest.rpartition("/")[2]
    return int(total) if unit.lower() == "bytes" and total.isdigit() else None


def may_carry(*, method: str, status: int, content_encoding: str | None, etag: str | None,
              validator: str | None, size: int, content_length: int | str | None = None,
              content_range: str | None = None) -> bool:
    """May a response with these fields carry the manifest of a representation of `size` bytes whose validator is
    `validator` (None: any strong ETag)? A manifest must never describe other bytes than the response's:

    - only a 200 or 206 to a GET or HEAD carries the representation (a 304, a 404, a POST's answer do not);
    - no `Content-Encoding`: the root covers the identity bytes, and a gzip body is other bytes;
    - a strong ETag, the manifest's one when the resolver named it: a file replaced since it was hashed, or
      another representation served at the same path, gets another ETag and so no field;
    - a 200's `Content-Length`, when present, is the manifest's size; a 206's `Content-Range` total, when
      present, is too (a multipart 206 has none at its top and is left to the ETag).
    """
    if method not in METHODS or status not in STATUSES or content_encoding:
        return False
    if not is_strong(etag) or (validator is not None and etag != validator):
        return False
    if status == 200 and content_length is not None:
        if isinstance(content_length, str):
            content_length = int(content_length) if content_length.strip().isdigit() else -1
        if content_length != size:
            return False
    if status == 206 and content_range is not None and _content_range_total(content_range) != size:
        return False
    return True


def may_hold(*, accept_ranges: str | None, cache_control: str | None, vary: str | None, set_cookie: bool,
             content_length: int | str | None) -> bool:
    """May the body of a response carrying the hint wait for its client to leave (`Publisher.hold_for`)? Only one
    the client can come back to by Range, and one the proxy will swarm: it relays a response that sets a cookie, is
    `private` or `no-store`, varies on more than Accept-Encoding, or has no Content-Length (`proxy.publish_gate`) as
    it comes, reading its whole body, which a hold would only delay."""
    if (accept_ranges or "").strip().lower() != "bytes" or set_cookie or content_length is None:
        return False
    directives = {d.strip().split("=", 1)[0].lower() for d in (cache_control or "").split(",")}
    if directives & {"private", "no-store"}:
        return False
    return all(token.strip().lower() in ("", "accept-encoding") for token in (vary or "").split(","))


@dataclasses.dataclass(frozen=True)
class LayerAnswer:
    status: int
    headers: dict[str, str]
    body: bytes  # the layer, or a short reason; a HEAD's answer carries the same headers and no body


def layer_answer(publisher: Publisher, method: str, path: str) -> LayerAnswer | None:
    """The layer endpoint's answer to `method path`, or None when the request is not for it (passed on).

    Only a GET counts its bytes in `layer_bytes` (the lab counts them as origin bytes): a HEAD sends none."""
    if method not in METHODS or not path.startswith(LAYER_PREFIX):
        return None
    layer = publisher.layer(path[len(LAYER_PREFIX):])
    if layer is None:
        return LayerAnswer(404, {"Content-Type": "text/plain; charset=utf-8"}, b"no such hash layer\n")
    if method == "GET":
        publisher.layer_bytes += len(layer)
    return LayerAnswer(200, {"Content-Type": LAYER_TYPE, "Cache-Control": LAYER_CACHE_CONTROL}, layer)


async def publish(publisher: Publisher, rep: Representation) -> Published | None:
    """`rep`'s manifest, or None when it cannot be computed: the response then goes out as without the plugin
    (an unreadable file is the server's own problem, which its handler reports as it would anyway)."""
    try:
        return await publisher.manifest(rep)
    except NotPublishable as exc:
        log.warning("no manifest published: %s", exc)
        return None


# -- files under a directory ---------------------------------------------------------------------------------------

def aiohttp_etag(st: os.stat_result) -> str:
    """aiohttp's `FileResponse` ETag (`web.static`, `add_static`): mtime in ns and size, in hex."""
    return f'"{st.st_mtime_ns:x}-{st.st_size:x}"'


def starlette_etag(st: os.stat_result) -> str:
    """Starlette's `FileResponse` ETag, so also `StaticFiles` and FastAPI's (which are Starlette's): the MD5 of
    `str(st_mtime) + "-" + str(st_size)`, st_mtime the float `os.stat` gives (starlette/responses.py,
    `set_stat_headers`; checked against Starlette 1.10)."""
    base = f"{st.st_mtime}-{st.st_size}"
    return '"' + hashlib.md5(base.encode(), usedforsecurity=False).hexdigest() + '"'


def file_under(root: pathlib.Path, path: str, prefix: str = "/") -> tuple[pathlib.Path, os.stat_result] | None:
    """The regular file that URL `path` names under `root` (already resolved) when served at `prefix`, and its
    `stat`; None when `path` is not under `prefix`, names no regular file, or leaves `root` (`..`, a symlink
    pointing out, a NUL byte). Symlinks are resolved first, as Starlette's `StaticFiles` (without
    `follow_symlink`) and aiohttp's `add_static` (without `follow_symlinks`) do, so both sides stat one file."""
    if not path.startswith(prefix):
        return None
    rest = path[len(prefix):]
    if not prefix.endswith("/"):
        if rest and not rest.startswith("/"):  # prefix "/files" does not serve "/filesx"
            return None
    try:
        target = (root / rest.lstrip("/")).resolve()
        target.relative_to(root)
        st = target.stat()
    except (OSError, ValueError):  # ValueError: outside root, or a NUL byte in the path
        return None
    return (target, st) if stat.S_ISREG(st.st_mode) else None


def file_representation(path: pathlib.Path, st: os.stat_result, validator: str | None) -> Representation:
    """`path` as a Representation from one `stat`: its mtime and size are the cache key's version, so a file
    replaced since it was hashed is hashed again, and (through `validator`) its old manifest is never sent."""
    def read():
        with open(path, "rb") as f:
            while chunk := f.read(READ_SIZE):
                yield chunk
    return Representation(str(path), st.st_size, read, validator=validator, version=(st.st_mtime_ns, st.st_size))
