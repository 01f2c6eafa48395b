"""What a node makes of the peers an origin lists (`Swarm-Peers`): read on a hinted head with the origin's manifest
only, and dialled only where the origin may send it (`dialable_peers`): a site on the Internet cannot aim its
visitors' nodes at their LAN, their loopback or a metadata service."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from proxy.origin_head import describe, dialable_peers
from server_plugin.publisher import LAYER_PREFIX
from swarm.content.manifest import HEADER, HINT_HEADER, build_manifest, format_header
from swarm.content.peer_field import PEERS_HEADER

DATA = b"x" * 100_000
LISTED = "8.8.8.8:6881, 10.0.0.5:6881, 127.0.0.10:7000, 169.254.169.254:8080, 192.168.1.2:6881, [2a00:1:2:3::1]:6881"


def head(**extra: str):
    manifest, layer = build_manifest([DATA], len(DATA))
    fields = CIMultiDict({"Content-Length": str(len(DATA)), "ETag": '"v1"', "Accept-Ranges": "bytes",
                          HEADER: format_header(manifest, layer, LAYER_PREFIX + manifest.root.hex()), **extra})
    return describe("http://origin.example/f.bin", CIMultiDict(), 200, fields)


def test_read_on_a_hinted_head_only():
    assert head(**{HINT_HEADER: "swarm", PEERS_HEADER: LISTED}).peers[0] == ("8.8.8.8", 6881)
    assert head(**{PEERS_HEADER: LISTED}).peers == ()  # not asked to swarm: nothing to fetch from them for


@pytest.mark.parametrize(("origin", "dialled"), [
    # A public origin (or one whose address is unknown): public peers only.
    ("93.184.216.34", [("8.8.8.8", 6881), ("2a00:1:2:3::1", 6881)]),
    (None, [("8.8.8.8", 6881), ("2a00:1:2:3::1", 6881)]),
    # An origin on the LAN or this machine (shared only when the user listed it): its network's peers too, never
    # a special-purpose address (169.254.169.254, a cloud's metadata service, is link-local).
    ("10.0.0.1", [("8.8.8.8", 6881), ("10.0.0.5", 6881), ("127.0.0.10", 7000), ("192.168.1.2", 6881),
                  ("2a00:1:2:3::1", 6881)]),
])
def test_dialable(origin, dialled):
    listed = head(**{HINT_HEADER: "swarm", PEERS_HEADER: LISTED}).peers
    assert list(dialable_peers(listed, origin)) == dialled
