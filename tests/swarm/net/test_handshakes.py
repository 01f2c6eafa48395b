"""The QUIC handshake gate as a table: which Initials for new connections a listener creates state for."""

from __future__ import annotations

import pytest

from swarm.net.handshakes import Decision, HandshakeGate

A, R, D = Decision.ADMIT, Decision.RETRY, Decision.DROP

# Each step: ("decide", address, validated, expected) — and when ADMIT, the connection is opened under the name
# given by its index in the table — or ("end", index of the step that opened it).
CASES = [
    ("the first connection of an address needs no Retry", {},
     [("decide", "127.0.0.2", False, A)]),
    ("a second one at a time does", {},
     [("decide", "127.0.0.2", False, A), ("decide", "127.0.0.2", False, R), ("decide", "127.0.0.2", True, A)]),
    ("once the first one is open, the next needs none", {},
     [("decide", "127.0.0.2", False, A), ("end", 0), ("decide", "127.0.0.2", False, A)]),
    ("one address opens at most per_address at a time, validated or not", {"per_address": 2},
     [("decide", "127.0.0.2", False, A), ("decide", "127.0.0.2", True, A), ("decide", "127.0.0.2", True, D),
      ("decide", "127.0.0.2", False, D), ("decide", "127.0.0.3", False, A), ("end", 1),
      ("decide", "127.0.0.2", True, A)]),
    ("an IPv4-mapped address is the IPv4 one", {"per_address": 1},
     [("decide", "127.0.0.2", False, A), ("decide", "::ffff:127.0.0.2", True, D)]),
    ("a public IPv6 /64 is one address: one subscriber's", {"per_address": 1},
     [("decide", "2a00:1:2:3::1", False, A), ("decide", "2a00:1:2:3::2", True, D),
      ("decide", "2a00:1:2:4::1", False, A)]),
    ("a public /24 opens at most per_network", {"per_network": 2},
     [("decide", "198.51.1.1", False, A), ("decide", "198.51.1.2", False, A), ("decide", "198.51.1.3", True, D),
      ("decide", "198.51.2.1", False, A)]),
    ("loopback addresses are each their own network", {"per_network": 1},
     [("decide", "127.0.0.2", False, A), ("decide", "127.0.0.3", False, A), ("decide", "127.0.0.4", False, A)]),
    ("past retry_above every source proves its address first", {"retry_above": 2},
     [("decide", "127.0.0.2", False, A), ("decide", "127.0.0.3", False, A), ("decide", "127.0.0.4", False, R),
      ("decide", "127.0.0.4", True, A), ("end", 0), ("decide", "127.0.0.5", False, R)]),
    ("retry_above 0: always a Retry", {"retry_above": 0},
     [("decide", "127.0.0.2", False, R), ("decide", "127.0.0.2", True, A)]),
    ("at most total opening, whoever asks", {"total": 2},
     [("decide", "127.0.0.2", False, A), ("decide", "127.0.0.3", False, A), ("decide", "127.0.0.4", True, D),
      ("end", 0), ("decide", "127.0.0.4", True, A)]),
    ("spoofed sources that never answer a Retry hold at most retry_above", {"total": 100, "retry_above": 4},
     [("decide", f"10.0.0.{i}", False, A if i < 4 else R) for i in range(20)]),
]  # fmt: skip


@pytest.mark.parametrize("name, bounds, steps", CASES, ids=[case[0] for case in CASES])
def test_gate_table(name: str, bounds: dict, steps: list) -> None:
    gate = HandshakeGate(**bounds)
    for index, step in enumerate(steps):
        if step[0] == "end":
            gate.ended(step[1])
            continue
        _, address, validated, expected = step
        assert gate.decide(address, validated) is expected, (index, step)
        if expected is A:
            gate.opened(index, address)
        assert len(gate) <= gate.total


def test_counts_follow_opened_and_ended_once_each():
    gate = HandshakeGate(per_address=2)
    gate.opened("a", "127.0.0.2")
    gate.opened("a", "127.0.0.2")  # (the same connection twice counts once)
    gate.opened("b", "[::ffff:127.0.0.2]")
    assert len(gate) == 2 and gate.held_by("127.0.0.2") == 2
    gate.ended("a")
    gate.ended("a")
    gate.ended("never opened")
    assert len(gate) == 1 and gate.held_by("127.0.0.2") == 1
    gate.ended("b")
    assert len(gate) == 0 and gate.held_by("127.0.0.2") == 0 and not gate._by_address and not gate._by_network
