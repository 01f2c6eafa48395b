"""The serving slot policy on a fake clock: who keeps a slot, who makes room, and the per-source shares.

Each case is a table of steps (`run` below):

    admit PEER ADDRESS NOW -> -         admitted into a free slot ("-"), or "-> evict X", or "-> refuse"
    took PEER NOW                       PEER took a block at NOW
    release PEER                        its connection ended

`flood(n, address, took_at)` is n connections from one address, each admitted at 0 and taking a block at
`took_at`: the attack of issue 35 (64 connections from one IP, one 16 KiB block each every 8 s).
"""

from __future__ import annotations

import pytest

from swarm.core.slots import PROTECT_FOR, Evict, Refuse, SlotPolicy


def flood(n: int, address: str, took_at: float, name: str = "f") -> list[str]:
    return [f"admit {name}{i} {address} 0 -> -" for i in range(n)] + [f"took {name}{i} {took_at}" for i in range(n)]


def distinct(n: int, took_at: float | None = None, name: str = "p") -> list[str]:
    """n peers, each from its own loopback address (each its own network)."""
    steps = [f"admit {name}{i} 127.0.1.{i + 1} 0 -> -" for i in range(n)]
    return steps + ([] if took_at is None else [f"took {name}{i} {took_at}" for i in range(n)])


def run(slots: SlotPolicy, steps: list[str]) -> None:
    for step in steps:
        words = step.split()
        if words[0] == "took":
            slots.downloaded(words[1], float(words[2]))
        elif words[0] == "release":
            slots.release(words[1])
        else:
            _, peer, address, now, _, *expected = words
            actions = slots.admit(peer, float(now), None if address == "none" else address)
            got = ["-"] if not actions else [
                "refuse" if isinstance(action, Refuse) else f"evict {action.peer}" for action in actions]
            assert " ".join(got) == " ".join(expected), step
            assert len(slots) <= slots.capacity


T = 5.0  # when the newcomer arrives: every flood connection took a block within PROTECT_FOR

CASES = [
    # --- honest behaviour: many distinct peers, exactly as before ------------------------------------------
    ("distinct peers all downloading: the newcomer is refused", 8, {},
     distinct(8, took_at=1.0) + ["admit new 127.0.2.1 5 -> refuse"]),
    ("distinct idle peers: the one idle longest makes room", 8, {},
     distinct(8) + ["took p0 1", "admit new 127.0.2.1 5 -> evict p1"]),
    ("a peer downloading is protected for PROTECT_FOR, then it is the least useful", 4, {},
     distinct(4, took_at=1.0) + [f"admit new 127.0.2.1 {1 + PROTECT_FOR} -> evict p0"]),
    # --- the flood: one address in every slot, every connection downloading --------------------------------
    ("a newcomer from another address takes a flood slot", 64, {},
     flood(64, "127.0.0.2", took_at=1.0) + ["took f7 0.5", f"admit new 127.0.0.3 {T} -> evict f7"]),
    ("and a second newcomer another", 64, {},
     flood(64, "127.0.0.2", took_at=1.0) + [f"admit a 127.0.0.3 {T} -> evict f0",
                                           f"admit b 127.0.0.4 {T} -> evict f1"]),
    ("the flood's reconnects are refused while its slots download", 64, {},
     flood(64, "127.0.0.2", took_at=1.0) + [f"admit new 127.0.0.3 {T} -> evict f0",
                                           f"admit f0again 127.0.0.2 {T} -> refuse"]),
    ("a flood connection that stopped downloading makes room for its own address", 8, {"per_address": 2},
     flood(8, "127.0.0.2", took_at=1.0) + ["took f1 0.5", "took f0 0.5",
                                           f"admit f8 127.0.0.2 {0.5 + PROTECT_FOR} -> evict f0"]),
    ("the flood cannot take the newcomer's slot before its first block", 8, {"per_address": 2},
     flood(8, "127.0.0.2", took_at=1.0) + [f"admit new 127.0.0.3 {T} -> evict f0",
                                           f"admit f8 127.0.0.2 {T + 1} -> refuse"]),
    ("a flood down to its share is protected again", 4, {"per_address": 2},
     flood(4, "127.0.0.2", took_at=1.0) + [f"admit a 127.0.0.3 {T} -> evict f0", f"admit b 127.0.0.4 {T} -> evict f1",
                                          "took a 6", "took b 6", "admit c 127.0.0.5 7 -> refuse"]),
    ("over its share is still admitted while slots are free", 8, {"per_address": 2},
     flood(7, "127.0.0.2", took_at=1.0) + ["admit f7 127.0.0.2 2 -> -"]),
    ("over-share slots go before an idle peer within its share", 4, {"per_address": 2},
     flood(3, "127.0.0.2", took_at=1.0) + ["admit idle 127.0.0.3 2 -> -", f"admit new 127.0.0.4 {T} -> evict f0"]),
    ("a source at its share does not push out other sources' idle peers", 4, {"per_address": 2},
     ["admit a 127.0.0.3 0 -> -", "admit b 127.0.0.4 0 -> -"] + flood(2, "127.0.0.2", took_at=1.0)
     + [f"admit f2 127.0.0.2 {T} -> refuse"]),
    # --- addresses and networks ---------------------------------------------------------------------------
    ("public addresses of one /24 share a network", 8, {"per_address": 2, "per_network": 4},
     [f"admit n{i} 198.51.1.{i + 1} 0 -> -" for i in range(8)] + [f"took n{i} 1" for i in range(8)]
     + [f"admit new 203.0.114.9 {T} -> evict n0"]),
    ("public addresses of different /24s do not", 8, {"per_address": 2, "per_network": 4},
     [f"admit n{i} 198.51.{i}.1 0 -> -" for i in range(8)] + [f"took n{i} 1" for i in range(8)]
     + [f"admit new 203.0.114.9 {T} -> refuse"]),
    ("a newcomer in a network at its share takes only that network's unprotected slots", 8,
     {"per_address": 2, "per_network": 4},
     [f"admit n{i} 198.51.1.{i + 1} 0 -> -" for i in range(4)] + distinct(4) + [f"took n{i} 1" for i in range(4)]
     + [f"admit n4 198.51.1.9 {T} -> refuse"]),
    ("loopback addresses are each their own network", 8, {"per_address": 2, "per_network": 4},
     distinct(8, took_at=1.0) + [f"admit new 127.0.2.1 {T} -> refuse"]),
    ("an IPv4-mapped IPv6 address counts as the IPv4 address", 4, {"per_address": 2},
     ["admit a 127.0.0.2 0 -> -", "admit b ::ffff:127.0.0.2 0 -> -", "admit c [::ffff:127.0.0.2] 0 -> -",
      "admit d 127.0.0.3 0 -> -", "took a 1", "took b 1", "took c 1", "took d 1",
      f"admit new 127.0.0.4 {T} -> evict a"]),
    ("public IPv6 addresses of one /64 are one subscriber's", 4, {"per_address": 2},
     ["admit a 2a00:1:2:3::1 0 -> -", "admit b 2a00:1:2:3::2 0 -> -", "admit c 2a00:1:2:3:ffff::9 0 -> -",
      "admit d 127.0.0.3 0 -> -", "took a 1", "took b 1", "took c 1", "took d 1",
      f"admit new 127.0.0.4 {T} -> evict a"]),
    ("public IPv6 addresses of one /48 share a network", 4, {"per_address": 1, "per_network": 2},
     [f"admit v{i} 2a00:1:2:{i}::1 0 -> -" for i in range(4)] + [f"took v{i} 1" for i in range(4)]
     + [f"admit new 2a00:9::1 {T} -> evict v0"]),
    ("a connection with no IP address counts in no group", 4, {"per_address": 1},
     [f"admit m{i} none 0 -> -" for i in range(4)] + [f"took m{i} 1" for i in range(4)]
     + [f"admit new 127.0.0.3 {T} -> refuse"]),
    ("release frees the share", 4, {"per_address": 2},
     flood(4, "127.0.0.2", took_at=1.0) + ["release f0", "release f1", "release f2",
                                           "admit a 127.0.0.3 2 -> -", "admit b 127.0.0.4 2 -> -",
                                           "admit c 127.0.0.5 2 -> -", "took a 3", "took b 3", "took c 3",
                                           f"admit f4 127.0.0.2 {T} -> refuse"]),
]  # fmt: skip


@pytest.mark.parametrize("name, capacity, shares, steps", CASES, ids=[case[0] for case in CASES])
def test_slot_table(name: str, capacity: int, shares: dict, steps: list[str]) -> None:
    run(SlotPolicy(capacity, **shares), steps)


def test_default_shares_are_a_sixteenth_per_address_and_a_quarter_per_network():
    slots = SlotPolicy(64)
    assert (slots.per_address, slots.per_network) == (4, 16)
    assert (SlotPolicy(4).per_address, SlotPolicy(4).per_network) == (1, 1)


def test_the_reasons_say_why():
    slots = SlotPolicy(4, per_address=2)
    run(slots, flood(4, "127.0.0.2", took_at=1.0))
    assert slots.held_by("127.0.0.2") == 4
    assert slots.admit("new", T, "127.0.0.3") == [
        Evict("f0", "slot given to a newcomer: address 127.0.0.2 holds more than its share")]
    assert slots.admit("again", T, "127.0.0.2") == [
        Refuse("again", "address 127.0.0.2 holds its share of slots, all downloading")]
    assert slots.held_by("127.0.0.2") == 3 and slots.held_by("127.0.0.3") == 1


def test_time_to_a_slot_for_a_newcomer_under_the_flood_is_its_first_try():
    """The attack as measured before the fix: 64 connections from one IP each take a block every 8 s, and
    newcomers try once a second. Before, every one was refused until the flood stopped; now the first gets in."""
    slots = SlotPolicy(64)
    now = 0.0
    run(slots, flood(64, "127.0.0.2", took_at=0.0))
    served_at = None
    while now < 60.0 and served_at is None:
        now += 1.0
        for i in range(64):  # each flood connection takes a block every 8 s, staggered
            if f"f{i}" in slots and int(now) % 8 == i % 8:
                slots.downloaded(f"f{i}", now)
        for i in range(64):  # and whatever was closed reconnects at once
            if f"f{i}" not in slots:
                slots.admit(f"f{i}", now, "127.0.0.2")
        if not any(isinstance(a, Refuse) for a in slots.admit(f"new{now}", now, "127.0.0.3")):
            served_at = now
    assert served_at == 1.0
