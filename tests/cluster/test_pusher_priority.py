"""Which of a fetch's connections are the pusher's (`cluster.run.pusher_flows`): the fetch's priority sources
(`PolicyConfig.priority_others`), so a root member's other peers make room for the pusher's flow."""

from __future__ import annotations

import types

import pytest

from cluster.run import pusher_flows
from swarm.discovery import Provider

SEEDER, OTHER = "aa" * 20, "bb" * 20


def provider(node: str, host: str, port: int = 7000) -> Provider:
    return Provider(bytes.fromhex(node), host, port, 1)


def connection(host: str, port: int = 7000) -> object:
    return types.SimpleNamespace(remote_address=(host, port))


@pytest.mark.parametrize(("to", "marked"), [
    (("10.0.0.1", 7000), True),  # the seeder's address
    (("10.0.0.1", 7001), False),  # an agent on the pusher's host, another port
    (("10.0.0.2", 7000), False),
])
def test_only_the_seeders_connection_is_marked(to: tuple[str, int], marked: bool) -> None:
    hook = pusher_flows([provider(OTHER, "10.0.0.2"), provider(SEEDER, "10.0.0.1"), provider(OTHER, "10.0.0.1", 7001)],
                        SEEDER)
    assert hook is not None and hook(connection(*to)) is marked


def test_nothing_is_marked_without_the_seeder_among_the_providers() -> None:
    # a rack member: the overlay gives it no connection to the pusher, and its fetch is as before
    assert pusher_flows([provider(OTHER, "10.0.0.2")], SEEDER) is None
