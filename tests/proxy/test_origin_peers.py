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


def head(origin_address: str | None = None, **extra: str):
    manifest, layer = build_manifest([DATA], len(DATA))
    fields = CIMultiDict({"Content-Length": str(len(DATA)), "ETag": '"v1"', "Accept-Ranges": "bytes",
                          HEADER: format_header(manifest, layer, LAYER_PREFIX + manifest.root.hex()), **extra})
    return describe("http://origin.example/f.bin", CIMultiDict(), 200, fields, origin_address=origin_address)


def test_read_on_a_hinted_head_only():
    assert head(**{HINT_HEADER: "swarm", PEERS_HEADER: LISTED}).peers[0] == ("8.8.8.8", 6881)
    assert head(**{PEERS_HEADER: LISTED}).peers == ()  # not asked to swarm: nothing to fetch from them for
    assert head("127.0.0.1", **{HINT_HEADER: "swarm", PEERS_HEADER: LISTED}).peers[2] == ("127.0.0.10", 7000)


PUBLIC_ONLY = [("8.8.8.8", 6881), ("2a00:1:2:3::1", 6881)]


@pytest.mark.parametrize(("origin", "dialled"), [
    # A public origin, one whose address is unknown or only a name, or one at an address of another kind: public
    # peers only.
    ("93.184.216.34", PUBLIC_ONLY),
    (None, PUBLIC_ONLY),
    ("", PUBLIC_ONLY),
    ("origin.example", PUBLIC_ONLY),
    ("fe80::1%eth0", PUBLIC_ONLY),
    ("198.18.0.1", PUBLIC_ONLY),
    # An origin on the LAN (shared only when the user listed it): its network's peers too, never this machine's
    # loopback (behind a reverse proxy the plugin lists the proxy's address with a port a client chose) nor a
    # special-purpose address (169.254.169.254, a cloud's metadata service, is link-local).
    ("10.0.0.1", [("8.8.8.8", 6881), ("10.0.0.5", 6881), ("192.168.1.2", 6881), ("2a00:1:2:3::1", 6881)]),
    # An origin on this machine (a lab, a test): loopback peers too.
    ("127.0.0.1", [("8.8.8.8", 6881), ("10.0.0.5", 6881), ("127.0.0.10", 7000), ("192.168.1.2", 6881),
                   ("2a00:1:2:3::1", 6881)]),
])
def test_dialable(origin, dialled):
    listed = head(**{HINT_HEADER: "swarm", PEERS_HEADER: LISTED}).peers  # no origin address: public only
    assert listed == tuple(PUBLIC_ONLY)
    everything = [("8.8.8.8", 6881), ("10.0.0.5", 6881), ("127.0.0.10", 7000), ("169.254.169.254", 8080),
                  ("192.168.1.2", 6881), ("2a00:1:2:3::1", 6881)]
    assert list(dialable_peers(everything, origin)) == dialled


def test_an_intranet_origin_behind_a_reverse_proxy_cannot_aim_nodes_at_their_own_loopback():
    """Behind nginx on 127.0.0.1 (or ::1) the plugin sees the proxy's address: a client that named port 6379 was
    listed as 127.0.0.1:6379, and a node whose LAN origin listed it dialled its own redis."""
    assert dialable_peers([("127.0.0.1", 6379), ("::1", 6379)], "10.0.0.5") == ()
    assert dialable_peers([("127.0.0.1", 6379)], "::ffff:10.0.0.5") == ()
