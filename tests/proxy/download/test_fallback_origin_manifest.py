"""The origin's own manifest (server_plugin) through real proxies on 127.0.0.x and a SlowOrigin running the
plugin: a hinted download swarms at once and trusts the origin's manifest; the first node takes blocks from the
origin by Range, the next from it; an origin whose Range requests fail is asked again from where delivery got;
and a field that lies or does not parse is never used."""

from __future__ import annotations

import contextlib
import hashlib

import pytest
import pytest_asyncio
from aiohttp import web
from multidict import CIMultiDict

from proxy.demo.local_swarm import Cluster
from proxy.demo.slow_origin import SlowOrigin
from proxy.origin_head import hinted, published
from proxy.origin_manifest import MAX_LAYER_BYTES, _read_at_most, fetch_layer
from server_plugin.aiohttp_plugin import install
from server_plugin.publisher import Publisher, Representation
from swarm.content.manifest import HEADER, HINT_HEADER, OriginManifest, build_manifest, format_header

BLOCKS = 81  # of 16 KiB: more than INLINE_HASHES, so the layer is fetched from its path, not inline
SIZE = (BLOCKS - 1) * 16384 + 777
DATA = (hashlib.sha256(b"origin manifest").digest() * (SIZE // 32 + 1))[:SIZE]
FAST_SWITCH = {"first_byte_timeout": "0.3", "min_rate": "160k", "rate_window": "0.5", "discover_size": "0"}
# An origin that hints is a busy one: at this rate its stream takes over a second, while the lookup that
# replaces it takes milliseconds on loopback. Unthrottled, the stream would deliver everything first.
BUSY_RATE = 1_000_000


def publish(origin: SlowOrigin, busy_at: int = 1) -> Publisher:
    publisher = Publisher(busy_at=busy_at)  # 1: every GET is "busy", since it counts itself

    def resolve(request):
        entry = origin.files.get(request.path)
        if entry is None:
            return None
        return Representation(request.path, len(entry[0]), lambda: (entry[0],), validator=entry[1])
    origin.setup.append(lambda app: install(app, resolve, publisher))
    return publisher


@contextlib.asynccontextmanager
async def serving(origin: SlowOrigin):
    """`origin` started, serving DATA; yields its URL."""
    await origin.start()
    try:
        yield origin.add("/big.bin", DATA)
    finally:
        await origin.stop()


@pytest_asyncio.fixture
async def cluster(tmp_path):
    group = Cluster(tmp_path, **FAST_SWITCH)
    yield group
    await group.close()


@pytest_asyncio.fixture
async def plugin_origin():
    origin = SlowOrigin(rate=BUSY_RATE)
    publisher = publish(origin)
    await origin.start()
    yield origin, publisher
    await origin.stop()


async def test_a_hinted_download_swarms_at_once_the_first_from_origin_ranges_the_next_from_peers(
        cluster, plugin_origin):
    origin, publisher = plugin_origin
    url = origin.add("/big.bin", DATA)
    first = await cluster.add()
    status, headers, body = await cluster.get(first, url)
    assert status == 200 and body == DATA and headers["ETag"] == origin.files["/big.bin"][1]
    record = cluster.last_record(first)
    assert record["transition"] == "hint" and record["manifest_source"] == "origin"
    assert record["bytes_origin"] == SIZE and record["bytes_peers"] == 0  # nobody else had it
    assert publisher.layer_bytes == BLOCKS * 32  # the layer from the origin: no provider had one
    ranges = [r for r in origin.requests if r[2] is not None]
    assert ranges and all(method == "GET" for method, _, _ in ranges)  # blocks by Range, not the stream
    assert first.engine.counters.published == 0  # the origin publishes; a node only announces

    origin.set_rate(300_000)  # the origin is busy: the peer should carry most of the second download
    second = await cluster.add()
    status, _, body = await cluster.get(second, url)
    assert status == 200 and body == DATA
    record = cluster.last_record(second)
    assert record["transition"] == "hint" and record["manifest_source"] == "origin"
    assert record["bytes_peers"] > SIZE // 2
    assert publisher.layer_bytes == BLOCKS * 32  # the second took the layer from its peer


async def test_when_origin_ranges_fail_and_no_peer_has_it_the_origin_stream_is_reopened(cluster):
    origin = SlowOrigin(rate=BUSY_RATE)
    publish(origin)

    @web.middleware
    async def ignore_range(request, handler):  # an origin that says Accept-Ranges but answers 200 to Range
        if "Range" in request.headers:
            request = request.clone(headers={k: v for k, v in request.headers.items()
                                             if k.lower() not in ("range", "if-range")})
        return await handler(request)
    origin.setup.append(lambda app: app.middlewares.insert(0, ignore_range))
    async with serving(origin) as url:
        node = await cluster.add()
        status, _, body = await cluster.get(node, url)
        assert status == 200 and body == DATA
        record = cluster.last_record(node)
        assert record["transition"] == "hint" and record["bytes_peers"] == 0
        assert record["error"] is None and record["swarm_error"].startswith("swarm_failed: ")
        gets = [r for r in origin.requests if r[0] == "GET" and r[1] == "/big.bin"]
        assert len(gets) >= 3  # the first GET (closed), the failed Range request, the reopened stream


async def test_a_lying_origin_manifest_is_caught_by_the_hash_check_and_no_wrong_byte_goes_out(cluster):
    origin = SlowOrigin(rate=BUSY_RATE)
    other = DATA[::-1]
    manifest, layer = build_manifest([other], len(other))  # the manifest of other bytes, consistently hashed

    def lie(app):
        async def on_prepare(request, response):
            if request.path == "/big.bin" and response.status in (200, 206):
                response.headers[HEADER] = format_header(manifest, layer, "/layer")
                response.headers[HINT_HEADER] = "swarm"

        async def serve_layer(request):
            return web.Response(body=b"".join(layer))
        app.on_response_prepare.append(on_prepare)
        app.router.add_get("/layer", serve_layer)
    origin.setup.append(lie)
    async with serving(origin) as url:
        node = await cluster.add()
        status, _, body = await cluster.get(node, url)
        # The Range source's blocks fail the lying layer's hashes; the origin stream is reopened and the
        # client gets exactly the origin's bytes (or is cut off: never wrong ones).
        assert status == 200 and body == DATA
        # The bad block banned the origin as a Range source, its last one: the swarm gave up at once, not
        # after the stall timeout.
        # The client got the whole body, so that is no error of the request, only of its swarm part.
        record = cluster.last_record(node)
        assert record["error"] is None and "no source left" in record["swarm_error"]


FIELDS = [
    # (fields, size) -> published?, hinted?
    ({}, SIZE, False, False),
    ({HEADER: "root=zz"}, SIZE, False, False),
    ({HEADER: "ok", "Content-Encoding": "gzip"}, SIZE, False, False),
    ({HEADER: "ok"}, SIZE + 1, False, False),
    ({HEADER: "ok"}, None, False, False),
    ({HEADER: "ok"}, SIZE, True, False),
    ({HEADER: "ok", HINT_HEADER: " Swarm "}, SIZE, True, True),
    ({HEADER: "ok", HINT_HEADER: "later"}, SIZE, True, False),
    # An object store's user metadata (S3 and S3-compatible stores, CDNs in front of them; GCS): the same field.
    ({"x-amz-meta-swarm-manifest": "ok"}, SIZE, True, False),
    ({"X-Goog-Meta-Swarm-Manifest": "ok"}, SIZE, True, False),
    ({"x-amz-meta-swarm-manifest": "ok"}, SIZE + 1, False, False),
    ({"x-amz-meta-swarm-manifest": "root=zz"}, SIZE, False, False),
    ({"x-amz-meta-other": "ok"}, SIZE, False, False),
    # `Swarm-Manifest` wins: a store's stale metadata cannot override what the server says
    ({HEADER: "ok", "x-amz-meta-swarm-manifest": "root=zz"}, SIZE, True, False),
    # two stores' copies are a repeat: neither is used
    ({"x-amz-meta-swarm-manifest": "ok", "x-goog-meta-swarm-manifest": "ok"}, SIZE, False, False),
]


@pytest.mark.parametrize("fields, size, usable, hint", FIELDS)
def test_which_fields_are_used(fields, size, usable, hint):
    manifest, layer = build_manifest([DATA], SIZE)
    headers = CIMultiDict((k, format_header(manifest, layer, "/l") if v == "ok" else v) for k, v in fields.items())
    found = published(headers, size)
    assert (found is not None) == usable
    assert (found is not None and hinted(headers)) == hint


def test_a_repeated_manifest_field_is_not_used():
    manifest, layer = build_manifest([DATA], SIZE)
    value = format_header(manifest, layer, "/l")
    assert published(CIMultiDict([(HEADER, value), (HEADER, value)]), SIZE) is None


class _Pieces:
    """A body that arrives in the given pieces, one per `read(n)`, as aiohttp's StreamReader hands them out."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = list(pieces)

    async def read(self, n: int) -> bytes:
        if not self.pieces:
            return b""
        piece = self.pieces.pop(0)
        if len(piece) > n:
            self.pieces.insert(0, piece[n:])
        return piece[:n]


READS = [
    # (pieces, limit) -> bytes read
    ([b"ab", b"cd", b"e"], 10, b"abcde"),
    ([b"abc", b"def"], 4, b"abcd"),
    ([b"a"] * 5, 3, b"aaa"),
    ([], 4, b""),
]


@pytest.mark.parametrize("pieces, limit, expected", READS)
async def test_a_layer_body_is_read_across_network_reads(pieces, limit, expected):
    assert await _read_at_most(_Pieces(pieces), limit) == expected


async def test_a_layer_too_large_to_hold_is_not_requested():
    blocks = MAX_LAYER_BYTES // 32 + 1
    claim = OriginManifest(bytes(32), blocks * 16384, 16384, layer_path="/layer")

    class NoSession:
        def get(self, *args, **kwargs):
            raise AssertionError("requested")
    assert await fetch_layer(NoSession(), "http://origin.test/f", claim) is None
