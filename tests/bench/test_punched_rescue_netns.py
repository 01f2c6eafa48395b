"""The Internet mode through two port-restricted NATs (`bench/internet_netns.py`): a node that strangers cannot
connect to still serves a download, through a hole punch a node of ours on the public network coordinates.

C, on a public machine, and B and A, each behind a port-restricted NAT (RFC 4787: endpoint-independent mapping,
address-and-port-dependent filtering), run `swarmproxy run` on the test internet's Mainline DHT, our own DHT off.
Each first fetches a small file C holds, so each has asked C for claims: C is the node each keeps a rendezvous
with, or asks to introduce it (`proxy.internet`, `bittorrent.mainline_claims`). B fetches the file from the slow
origin; then A fetches it. A's lookup finds B's address on the DHT; a direct connection there is refused by B's
router; C introduces them, both punch, and A asks B's claims and fetches B's blocks over QUIC.

The punch datagrams' TTL is 2 here (`--punch-ttl`): one passes its own router and dies in the internet namespace,
before the other side's router (tests/bench/test_punch_netns.py says why)."""

from __future__ import annotations

import hashlib
import time

import pytest

from bench.bad_networks import until
from bench.dht_wait import claim_on_the_dht
from bench.internet_lab import Origin, curl, payload
from bench.internet_netns import Topology, netns_missing

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(netns_missing() is not None, reason=str(netns_missing()))]

SIZE = 1_000_000
RATE = 200_000  # B/s: the origin, under the nodes' --min-rate
NODE_ARGS = ("--trust", "any", "--min-rate", "400k", "--rate-window", "0.5", "--first-byte-timeout", "0.5",
             "--early-lookup", "0", "--discover-size", "0", "--punch-ttl", "2", "--no-adaptive")


def _fetch(internet, node, url: str, tmp_path, name: str) -> dict:
    record = curl(internet, node.machine, url, tmp_path / name, node.ready["proxy"], time.monotonic())
    assert record["status"] == "200", record
    return record


def _on_the_dht(internet, url: str, address: list) -> None:
    """Until the DHT holds the claim under `url`'s key at `address` (a download started before would find nothing:
    a node sends its announcement when its own search is over, and a search that asks a node behind a NAT, as the
    DHT's nodes take an announcer in, waits out a timeout first)."""
    assert claim_on_the_dht(internet, internet.public[0], url) == [address]


def _punching(node) -> dict:
    return node.admin("/_swarm/status")["network"].get("hole_punching") or {}


def test_a_node_behind_a_port_restricted_nat_serves_through_a_punch(tmp_path):
    with Topology(dht_nodes=3, publics=2, homes=("port-restricted", "port-restricted")) as internet:
        internet.assert_isolated()
        origin = Origin(internet, internet.public[0], RATE, SIZE)
        meet_url = origin.url.replace("/file.bin", "/f0.bin")
        c = internet.start_node(internet.public[1], tmp_path / "c", *NODE_ARGS)
        b = internet.start_node(internet.hosts[0], tmp_path / "b", *NODE_ARGS)
        a = internet.start_node(internet.hosts[1], tmp_path / "a", *NODE_ARGS)
        nodes = (a, b, c)
        for node in nodes:
            until(lambda node=node: node.admin("/_swarm/status")["network"].get("dht_nodes"), "a DHT node", 60, nodes)

        _fetch(internet, c, meet_url, tmp_path, "c-f0")
        until(lambda: c.admin("/_swarm/status")["swarm"]["published"] >= 1, "C to vouch for f0", 60, nodes)
        _on_the_dht(internet, meet_url, [internet.public[1].address, c.peer_port])
        for node in (b, a):  # each asks C for its claims on f0: C is the node they know
            _fetch(internet, node, meet_url, tmp_path, f"{node.machine.name}-f0")
        c_at = f"{internet.public[1].address}:{c.peer_port}"
        until(lambda: c_at in _punching(b).get("rendezvous", ()), "B's rendezvous with C", 60, nodes)

        published = b.admin("/_swarm/status")["swarm"]["published"]  # (f0 came from C: no vouch of B's)
        _fetch(internet, b, origin.url, tmp_path, "b-file")
        until(lambda: b.admin("/_swarm/status")["swarm"]["published"] > published, "B to vouch for the file", 60, nodes)
        _on_the_dht(internet, origin.url, [internet.hosts[0].home.wan, b.peer_port])
        got = _fetch(internet, a, origin.url, tmp_path, "a-file")
        assert got["digest"] == hashlib.sha256(payload(SIZE)).hexdigest(), got

        record = until(lambda: next((r for r in reversed(a.admin("/_swarm/requests"))
                                     if r.get("url") == origin.url and r.get("status") == 200), None),
                       "A's request record", 60, nodes)
        assert record["bytes_peers"] > 0, (record, _punching(a), _punching(b))  # from B: C never held the file
        assert record["bytes_origin"] + record["bytes_peers"] == SIZE, record
        assert _punching(a).get("punched_to", 0) >= 1, _punching(a)
        assert _punching(c).get("introduced", 0) >= 1, _punching(c)
        assert _punching(b).get("introductions_acted_on", 0) >= 1, _punching(b)
        # The punched peer's connection is not a stranger's: B still keeps its rendezvous, as it must.
        assert c_at in _punching(b).get("rendezvous", ()), _punching(b)
        assert b.admin("/_swarm/status")["swarm"]["bytes_uploaded"] > 0
