"""Which agents a push targets (`--hosts`): a glob on DC/RACK/NAME."""

import pytest

from cluster.push import PushResult, result_json, targeted
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


def test_result_json_reports_the_seeder_ratio():
    text = result_json(PushResult("t", "ab", 1000, 1.23456, 1100, 12))
    assert '"seeder_ratio": 1.1' in text and '"seconds": 1.235' in text
