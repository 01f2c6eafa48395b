"""Hole punching for QUIC in the test internet (`bench/internet_netns.py`): two hosts behind NATs that map nothing
meet through a coordinator on a public machine (`swarm.core.punch`, `swarm.service.punch`), the requester knowing
the target only as a stranger would: its router's address and its listening port.

Behind port-restricted NATs (endpoint-independent mapping, address-and-port-dependent filtering) a direct QUIC
connection to the other host's mapped address is dropped, and with punching it is made; behind symmetric NATs the
mapping the coordinator saw is not the one towards the other host, and punching fails, as RFC 4787 predicts."""

from __future__ import annotations

import json
import select
import subprocess
import sys

import pytest

from bench.internet_netns import Topology, netns_missing

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(netns_missing() is not None, reason=str(netns_missing()))]

COORDINATOR_PORT, TARGET_PORT, REQUESTER_PORT = 7000, 7001, 7002
# The punch datagrams' TTL here (both sides'): one passes its own router (1) and dies in the internet namespace (2),
# before the other side's router, which would otherwise take it for a stranger's and, conntrack seeing a clash, give
# that side's own outgoing packets another port (observed: with the system's TTL the punch failed).
TTL = 2


def _line(process: subprocess.Popen, wait: float = 30.0) -> dict:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], wait)
    assert ready, "no answer in time"
    line = process.stdout.readline()
    assert line, f"exited with {process.wait()}"
    return json.loads(line)


def _node(internet: Topology, machine, *args: object) -> subprocess.Popen:
    return internet.spawn(machine, [sys.executable, "-m", "tests.bench.punch_node", *map(str, args)],
                          stdout=subprocess.PIPE, text=True)


def _meet(kind: str) -> tuple[dict, dict]:
    """(a direct dial of the target's mapped address, the punched connection), behind two NATs of `kind`."""
    with Topology(dht_nodes=0, publics=1, homes=(kind, kind)) as internet:
        internet.assert_isolated()
        public = internet.public[0]
        requester, target = internet.hosts
        assert target.home is not None
        coordinator = _node(internet, public, "coordinator", COORDINATOR_PORT)
        _line(coordinator)
        at = f"{public.address}:{COORDINATOR_PORT}"
        serving = _node(internet, target, "target", TARGET_PORT, at, TTL)
        node_id = _line(serving)["node_id"]
        # The target as a stranger knows it (as it would announce itself): its router's address, its listening port.
        known_at = f"{target.home.wan}:{TARGET_PORT}"
        direct = _line(_node(internet, requester, "direct", known_at))
        punched = _line(_node(internet, requester, "requester", REQUESTER_PORT, at, known_at, TTL))
        if punched["ok"]:
            assert punched["peer"] == node_id, punched
        return direct, punched


def test_behind_port_restricted_nats_a_punch_opens_the_way_a_direct_dial_cannot():
    direct, punched = _meet("port-restricted")
    assert not direct["ok"], direct
    assert punched["ok"], punched
    assert punched["remote"][1] == TARGET_PORT  # the target's mapped port: the NAT kept its listener's


def test_behind_symmetric_nats_punching_fails_as_rfc_4787_predicts():
    """The coordinator sees the target's session come from another port than the one the target listens on (and
    would announce): no session comes from the address asked for."""
    direct, punched = _meet("symmetric")
    assert not direct["ok"], direct
    assert not punched["ok"], punched
    assert "UNKNOWN_PEER" in punched["error"], punched
