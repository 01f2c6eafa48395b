"""Which agents a push targets (`--hosts`): a glob on DC/RACK/NAME; the rack the seeder says it sits in."""

import pytest

from cluster.overlay import Location
from cluster.push import PushResult, result_json, site_to_say, targeted
from cluster.records import AgentRecord

AGENTS = {
    "n1": AgentRecord("10.0.0.1", 1, "fra1", "r1", "web-1"),
    "n2": AgentRecord("10.0.0.2", 1, "fra1", "r2", "db-1"),
    "n3": AgentRecord("10.0.1.1", 1, "ams1", "r1", "web-2"),
}


@pytest.mark.parametrize("pattern, expected", [
    ("*", {"n1", "n2", "n3"}),
    ("fra1/*", {"n1", "n2"}),
    ("*/r1/*", {"n1", "n3"}),
    ("*/web-*", {"n1", "n3"}),
    ("ams1/r2/*", set()),
])
def test_targeted(pattern, expected):
    assert targeted(AGENTS, pattern) == expected


def tekel_agents(sizes: dict[str, int]) -> dict[str, AgentRecord]:
    return {f"{rack}h{i}": AgentRecord(f"10.0.{n}.{i}", 1, "dc1", rack, f"{rack}h{i}")
            for n, (rack, size) in enumerate(sizes.items()) for i in range(size)}


@pytest.mark.parametrize("sizes, pattern, says", [
    ({"r1": 5, "r2": 4, "r3": 7, "r4": 1}, "*", True),  # Tekel's: 2 + 2 + 1 representants fill the five DC slots
    ({"r1": 5, "r2": 4, "r4": 1}, "*", False),  # rack 3 not there yet (it comes late): 3 of 5, free slots for it
    ({"r1": 5, "r2": 4, "r3": 7, "r4": 1}, "dc1/r[12]/*", False),  # only the targeted agents count
    ({"r2": 4}, "*", False),  # no other rack
])
def test_the_seeder_says_its_rack_only_when_the_other_racks_fill_the_dc_slots(sizes, pattern, says):
    site = Location("dc1", "r2")
    assert site_to_say(site, tekel_agents(sizes), pattern) == (site if says else None)
    assert site_to_say(None, tekel_agents(sizes), pattern) is None


def test_result_json_reports_the_seeder_ratio():
    text = result_json(PushResult("t", "ab", 1000, 1.23456, 1100, 12))
    assert '"seeder_ratio": 1.1' in text and '"seconds": 1.235' in text
