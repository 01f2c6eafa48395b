"""What a node learns of its own reachability, on a fake clock: the two-networks rule, strangers' connections, expiry,
what is announced, the probe schedule and the sentence for the status page.

Each case is a table of steps (`run` below); times are seconds, transports TCP or QUIC:

    listen TCP PORT NOW                             the listener opened
    back TCP PORT PEER OUTCOME NOW -> yes|no        a connect-back's outcome (`Outcome` value, "_" for a space);
                                                    whether it counted
    inbound TCP PORT SOURCE NOW -> yes|no           a stranger connected
    mapped PORT NOW / unmapped NOW WHY...           what the router said (for every transport)
    state TCP NOW = STATE                           `State` value
    announce NOW = yes|no
    next NOW = WHEN|none                            `next_probe`
"""

from __future__ import annotations

import pytest

from swarm.core.reachability import (
    EVIDENCE_FOR,
    FIRST_PROBE,
    MAPPING_SETTLE,
    PROBE_ROUND,
    REPROBE,
    UNKNOWN_RETRY,
    Outcome,
    Reachability,
)
from swarm.net import wire

# Public addresses in distinct networks (the test internet's, `bench/internet_plan.py`), and a second of N1's /24.
N1, N1B, N2, N3 = "7.7.1.1", "7.7.1.2", "7.7.2.1", "7.7.3.1"
E = EVIDENCE_FOR


def run(reach: Reachability, steps: list[str]) -> None:
    for step in steps:
        words = step.split()
        verb = words[0]
        if verb == "listen":
            reach.listening(wire.Transport[words[1]], int(words[2]), float(words[3]))
        elif verb == "back":
            _, transport, port, peer, outcome, now, _, expected = words
            counted = reach.connect_back(wire.Transport[transport], int(port), peer, Outcome(outcome.replace("_", " ")),
                                         float(now))
            assert counted == (expected == "yes"), step
        elif verb == "inbound":
            _, transport, port, source, now, _, expected = words
            assert reach.inbound(wire.Transport[transport], int(port), source, float(now)) == (expected == "yes"), step
        elif verb == "mapped":
            reach.mapped(int(words[1]), float(words[2]))
        elif verb == "unmapped":
            reach.not_mapped(" ".join(words[2:]), float(words[1]))
        elif verb == "state":
            _, transport, now, _, expected = words
            assert reach.state(wire.Transport[transport], float(now)) == expected, step
        elif verb == "announce":
            assert reach.announce(float(words[1])) == (words[3] == "yes"), step
        elif verb == "next":
            due = reach.next_probe(float(words[1]))
            assert (None if words[3] == "none" else float(words[3])) == due, f"{step}: {due}"
        else:
            raise AssertionError(f"unknown step {step}")


TCP = ["listen TCP 5000 0"]
BOTH = ["listen TCP 5000 0", "listen QUIC 5000 0"]

CASES = [
    # --- the two-networks rule ----------------------------------------------------------------------------
    ("nothing known at first, and the port is announced", {}, TCP + ["state TCP 1 = unknown", "announce 1 = yes"]),
    ("one peer's refusal is not enough", {},
     TCP + [f"back TCP 5000 {N1} refused 10 -> yes", "state TCP 11 = unknown", "announce 11 = yes"]),
    ("nor any number of peers in one network", {},
     TCP + [f"back TCP 5000 7.7.1.{i} refused {10 + i} -> yes" for i in range(1, 11)]
     + ["state TCP 30 = unknown", "announce 30 = yes"]),
    ("nor peers of one IPv6 /48", {},
     TCP + ["back TCP 5000 2a00:1:2:3::1 refused 10 -> yes", "back TCP 5000 2a00:1:2:4::1 timed_out 11 -> yes",
            "state TCP 12 = unknown"]),
    ("failures from two networks make it unreachable, and it is not announced", {},
     TCP + [f"back TCP 5000 {N1} refused 10 -> yes", f"back TCP 5000 {N1B} refused 11 -> yes",
            "state TCP 12 = unknown", f"back TCP 5000 {N2} timed_out 13 -> yes", "state TCP 14 = unreachable",
            "announce 14 = no"]),
    ("a connection without a proof is a failure", {},
     TCP + [f"back TCP 5000 {N1} no_proof 10 -> yes", f"back TCP 5000 {N2} no_proof 11 -> yes",
            "state TCP 12 = unreachable"]),
    ("a peer that did not try or did not answer teaches nothing", {},
     TCP + [f"back TCP 5000 {N1} not_attempted 10 -> no", f"back TCP 5000 {N2} no_answer 11 -> no",
            f"back TCP 5000 {N3} not_attempted 12 -> no", "state TCP 13 = unknown"]),
    ("failures from private or loopback peers count for nothing", {},
     TCP + ["back TCP 5000 192.168.1.5 refused 10 -> no", "back TCP 5000 127.0.0.2 refused 11 -> no",
            f"back TCP 5000 {N1} refused 12 -> yes", "state TCP 13 = unknown"]),
    ("in a lab each loopback address is its own network", {"allow_private": True},
     TCP + ["back TCP 5000 127.0.0.2 refused 10 -> yes", "back TCP 5000 127.0.0.3 refused 11 -> yes",
            "state TCP 12 = unreachable"]),
    ("nor special-purpose ones, even in a lab", {"allow_private": True},
     TCP + ["back TCP 5000 203.0.113.1 refused 10 -> no", "back TCP 5000 198.51.100.1 refused 11 -> no",
            "state TCP 12 = unknown"]),
    # --- proofs and strangers -----------------------------------------------------------------------------
    ("a proof makes it reachable", {}, TCP + [f"back TCP 5000 {N1} proved 10 -> yes", "state TCP 11 = reachable"]),
    ("failures before the proof are forgotten by it", {},
     TCP + [f"back TCP 5000 {N1} refused 10 -> yes", f"back TCP 5000 {N2} refused 11 -> yes",
            "state TCP 12 = unreachable", f"back TCP 5000 {N3} proved 13 -> yes", "state TCP 14 = reachable",
            "announce 14 = yes"]),
    ("failures from two networks after it outweigh it", {},
     TCP + [f"back TCP 5000 {N3} proved 10 -> yes", f"back TCP 5000 {N1} refused 11 -> yes",
            "state TCP 12 = reachable", f"back TCP 5000 {N2} refused 13 -> yes", "state TCP 14 = unreachable"]),
    ("until something reaches it again", {},
     TCP + [f"back TCP 5000 {N1} refused 11 -> yes", f"back TCP 5000 {N2} refused 13 -> yes",
            f"inbound TCP 5000 {N3} 20 -> yes", "state TCP 21 = reachable"]),
    ("a stranger's connection proves its transport and port only", {},
     BOTH + [f"inbound QUIC 5000 {N1} 10 -> yes", "state QUIC 11 = reachable", "state TCP 11 = unknown",
             f"inbound TCP 6000 {N1} 12 -> no", "state TCP 13 = unknown"]),
    ("strangers from loopback or a LAN prove nothing", {},
     TCP + ["inbound TCP 5000 127.0.0.1 10 -> no", "inbound TCP 5000 10.0.0.7 10 -> no",
            "inbound TCP 5000 fe80::1 10 -> no", "inbound TCP 5000 node-1 10 -> no", "state TCP 11 = unknown"]),
    ("in a lab they do", {"allow_private": True},
     TCP + ["inbound TCP 5000 127.0.0.1 10 -> yes", "state TCP 11 = reachable"]),
    ("a probe of another port says nothing of ours", {},
     TCP + [f"back TCP 6000 {N1} refused 10 -> no", f"back TCP 6000 {N2} refused 11 -> no",
            "state TCP 12 = unknown", f"back TCP 6000 {N3} proved 13 -> no", "state TCP 14 = unknown"]),
    ("nor of a transport we do not listen by", {},
     TCP + [f"back QUIC 5000 {N1} proved 10 -> no", f"inbound QUIC 5000 {N1} 10 -> no", "state QUIC 11 = unknown"]),
    ("a new port forgets what was learnt of the old one", {},
     TCP + [f"back TCP 5000 {N1} proved 10 -> yes", "listen TCP 5001 20", "state TCP 21 = unknown",
            "listen TCP 5001 22"]),
    # --- expiry -------------------------------------------------------------------------------------------
    ("a proof counts for EVIDENCE_FOR", {},
     TCP + [f"back TCP 5000 {N1} proved 10 -> yes", f"state TCP {10 + E - 1} = reachable",
            f"state TCP {10 + E} = unknown"]),
    ("so does a stranger's connection", {},
     TCP + [f"inbound TCP 5000 {N1} 10 -> yes", f"state TCP {10 + E - 1} = reachable",
            f"state TCP {10 + E} = unknown"]),
    ("and each failure", {},
     TCP + [f"back TCP 5000 {N1} refused 10 -> yes", f"back TCP 5000 {N2} refused {E} -> yes",
            f"state TCP {E + 9} = unreachable", f"state TCP {E + 10} = unknown", "announce 3000 = yes"]),
    # --- what is announced --------------------------------------------------------------------------------
    ("announced while one transport is not unreachable", {},
     BOTH + [f"back TCP 5000 {N1} refused 10 -> yes", f"back TCP 5000 {N2} refused 11 -> yes",
             "state TCP 12 = unreachable", "state QUIC 12 = unknown", "announce 12 = yes",
             f"back QUIC 5000 {N1} timed_out 13 -> yes", f"back QUIC 5000 {N2} timed_out 14 -> yes",
             "announce 15 = no", f"inbound QUIC 5000 {N3} 16 -> yes", "announce 17 = yes"]),
    ("nothing is announced before the listener opens", {}, ["announce 0 = no", "state TCP 0 = unknown"]),
    # --- when to probe ------------------------------------------------------------------------------------
    ("not before the listener opens", {}, ["next 0 = none"]),
    ("soon after it opens", {}, ["listen TCP 5000 100", f"next 100 = {100 + FIRST_PROBE}"]),
    ("every REPROBE once known", {},
     TCP + [f"back TCP 5000 {N1} proved 10 -> yes", f"next 11 = {10 + REPROBE}"]),
    ("unreachable is known too", {},
     TCP + [f"back TCP 5000 {N1} refused 10 -> yes", f"back TCP 5000 {N2} refused 12 -> yes",
            f"next 13 = {10 + REPROBE}"]),
    ("backing off while unknown, a round at a time", {},
     TCP + [f"back TCP 5000 {N1} no_answer 10 -> no", f"back TCP 5000 {N2} not_attempted {10 + PROBE_ROUND - 1} -> no",
            f"next 50 = {10 + UNKNOWN_RETRY}",
            f"back TCP 5000 {N1} no_answer 100 -> no", f"next 101 = {100 + 2 * UNKNOWN_RETRY}",
            f"back TCP 5000 {N1} no_answer 300 -> no", f"next 301 = {300 + 4 * UNKNOWN_RETRY}"]),
    ("the back-off stops at REPROBE", {},
     TCP + [f"back TCP 5000 {N1} no_answer {10 + 100 * i} -> no" for i in range(10)]
     + [f"next 1000 = {910 + REPROBE}"]),
    ("and starts again once known", {},
     TCP + [f"back TCP 5000 {N1} no_answer {10 + 100 * i} -> no" for i in range(3)]
     + [f"back TCP 5000 {N1} proved 300 -> yes", f"next 301 = {300 + REPROBE}",
        f"back TCP 5000 {N1} no_answer {300 + E} -> no", f"next {301 + E} = {300 + E + UNKNOWN_RETRY}"]),
    ("a transport left unknown keeps the back-off", {},
     BOTH + [f"back TCP 5000 {N1} proved 10 -> yes", f"back QUIC 5000 {N1} no_answer 10 -> no",
             f"next 11 = {10 + UNKNOWN_RETRY}", f"inbound QUIC 5000 {N2} 12 -> yes", f"next 13 = {10 + REPROBE}"]),
    ("soon after the router's answer changed", {},
     TCP + [f"back TCP 5000 {N1} proved 10 -> yes", "unmapped 500 UPnP: no IGD found",
            f"next 501 = {500 + MAPPING_SETTLE}", "unmapped 502 UPnP: no IGD found",  # (the same answer again)
            f"next 503 = {500 + MAPPING_SETTLE}",
            f"back TCP 5000 {N1} proved 506 -> yes", f"next 507 = {506 + REPROBE}",
            "mapped 5000 600", f"next 601 = {600 + MAPPING_SETTLE}"]),
    ("a mapping before the first probe brings it forward", {},
     ["listen TCP 5000 100", "mapped 5000 101", f"next 102 = {101 + MAPPING_SETTLE}"]),
]  # fmt: skip


@pytest.mark.parametrize("name, settings, steps", CASES, ids=[case[0] for case in CASES])
def test_reachability_table(name: str, settings: dict, steps: list[str]) -> None:
    run(Reachability(**settings), steps)


# Each case: steps, then the sentence for the status page one second after the last (at 20, or 190 for minutes).
WHY = [
    ("not listening", [], "the peer port is not open"),
    ("not probed yet", TCP, "not known yet whether peers can reach port 5000 over TCP (not probed yet)"),
    ("nobody could tell", TCP + [f"back TCP 5000 {N1} no_answer 10 -> no"],
     "not known yet whether peers can reach port 5000 over TCP (no peer could tell)"),
    ("one network failed", TCP + [f"back TCP 5000 {N1} refused 10 -> yes"],
     "not known yet whether peers can reach port 5000 over TCP (refused by 1 peer in 1 network: peers in another "
     "network must fail too)"),
    ("the issue's example", TCP + [f"back TCP 5000 {N1} refused 10 -> yes", f"back TCP 5000 {N2} refused 11 -> yes",
                                   "unmapped 12 UPnP: no IGD found"],
     "no peer could connect back to port 5000 over TCP (refused by 2 peers in 2 networks); the router mapped "
     "nothing: UPnP: no IGD found"),
    ("failures of both kinds", TCP + [f"back TCP 5000 {N1} refused 10 -> yes",
                                      f"back TCP 5000 {N2} timed_out 11 -> yes"],
     "no peer could connect back to port 5000 over TCP (refused by 1 peer, timed out for 1 peer, in 2 networks)"),
    ("a proof", TCP + [f"back TCP 5000 {N1} proved 19 -> yes", "mapped 5000 19"],
     "reachable over TCP at port 5000: a peer in 7.7.1.0/24 connected back 1 s ago; the router maps port 5000 (TCP)"),
    ("a stranger, minutes ago", TCP + [f"inbound TCP 5000 {N2} 10 -> yes", "mapped 40000 189"],
     "reachable over TCP at port 5000: a peer from 7.7.2.0/24 connected 3 min ago; the router maps its port 40000 "
     "to our 5000 (TCP), not 5000 itself"),
    ("both transports", BOTH + [f"inbound QUIC 5000 {N2} 19 -> yes"],
     "not known yet whether peers can reach port 5000 over TCP (not probed yet); reachable over QUIC at port 5000: "
     "a peer from 7.7.2.0/24 connected 1 s ago"),
]  # fmt: skip


@pytest.mark.parametrize("name, steps, sentence", WHY, ids=[case[0] for case in WHY])
def test_why(name: str, steps: list[str], sentence: str) -> None:
    reach = Reachability()
    run(reach, steps)
    assert reach.why(190.0 if "minutes" in name else 20.0) == sentence


def test_status_for_the_admin_api():
    reach = Reachability()
    run(reach, BOTH + ["unmapped 5 NAT-PMP: no router", f"back TCP 5000 {N1} refused 10 -> yes",
                       f"back TCP 5000 {N2} refused 11 -> yes", f"inbound QUIC 5000 {N3} 12 -> yes"])
    status = reach.status(20.0)
    assert status["announce"] is True and status["why"] == reach.why(20.0)
    assert status["next_probe_in"] == 10 + REPROBE - 20
    assert status["transports"] == {
        "tcp": {"state": "unreachable", "port": 5000, "reached_ago": None, "reached_by": None, "failures": 2,
                "failure_networks": 2, "mapping": "the router mapped nothing: NAT-PMP: no router"},
        "quic": {"state": "reachable", "port": 5000, "reached_ago": 8.0, "reached_by": "inbound", "failures": 0,
                 "failure_networks": 0, "mapping": "the router mapped nothing: NAT-PMP: no router"},
    }


def test_a_mapping_for_one_transport_is_told_for_it_alone():
    reach = Reachability()
    run(reach, BOTH)
    reach.mapped(5000, 1.0, wire.Transport.TCP)
    reach.not_mapped("UPnP: no IGD found", 1.0)
    assert reach.why(2.0) == ("not known yet whether peers can reach port 5000 over TCP (not probed yet); the router "
                              "maps port 5000 (TCP); not known yet whether peers can reach port 5000 over QUIC (not "
                              "probed yet); the router mapped nothing: UPnP: no IGD found")


def test_failures_remembered_are_bounded():
    reach = Reachability()
    run(reach, TCP)
    for i in range(1000):
        reach.connect_back(wire.Transport.TCP, 5000, f"7.{i // 250}.{i % 250}.1", Outcome.REFUSED, float(i))
    assert len(reach._ports[wire.Transport.TCP].failures) <= 32
