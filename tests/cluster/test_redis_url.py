"""cluster.redis_url: what a --redis URL names (one server, or a Sentinel-managed primary), its options on each
side, its passwords kept out of messages, and a clear error for a URL that names nothing (table-driven)."""

from __future__ import annotations

import pytest
from redis.asyncio.sentinel import MasterNotFoundError

from bench.cluster_harness import free_port
from cluster.coord import Coord
from cluster.errors import ConfigError, RedisUnavailable
from cluster.redis_url import SentinelClient, client, describe, first_host, is_sentinel, parse_sentinel, redacted

T = 3.0  # the call timeout the Coord passes


@pytest.mark.parametrize("url, sentinels, service, primary, sentinel", [
    pytest.param("redis+sentinel://10.0.0.1:26379,10.0.0.2:26380/coord", (("10.0.0.1", 26379), ("10.0.0.2", 26380)),
                 "coord", {}, {}, id="two-sentinels"),
    pytest.param("redis+sentinel://s1,s2:1234/coord", (("s1", 26379), ("s2", 1234)), "coord", {}, {},
                 id="default-port"),
    pytest.param("redis+sentinel://[::1]:26379,[fe80::1]/coord", (("::1", 26379), ("fe80::1", 26379)), "coord", {},
                 {}, id="ipv6"),
    pytest.param("redis+sentinel://swarmproxy:pw@s1:1/coord/3", (("s1", 1),), "coord",
                 {"username": "swarmproxy", "password": "pw", "db": 3}, {}, id="acl-user-and-db"),
    pytest.param("redis+sentinel://:p%40ss@s1:1/coord?db=2", (("s1", 1),), "coord", {"password": "p@ss", "db": 2}, {},
                 id="password-only-quoted-db-option"),
    pytest.param("rediss+sentinel://u:p@s1:1/coord?ssl_ca_certs=/etc/ca.pem", (("s1", 1),), "coord",
                 {"ssl": True, "ssl_ca_certs": "/etc/ca.pem", "username": "u", "password": "p"},
                 {"ssl": True, "ssl_ca_certs": "/etc/ca.pem"}, id="tls-both-sides-same-ca"),
    pytest.param("rediss+sentinel://s1:1/coord?ssl_ca_certs=/ca&sentinel_ssl=no", (("s1", 1),), "coord",
                 {"ssl": True, "ssl_ca_certs": "/ca"}, {}, id="tls-primary-only"),
    pytest.param("redis+sentinel://s1:1/coord?sentinel_ssl=yes", (("s1", 1),), "coord", {}, {"ssl": True},
                 id="tls-sentinels-only"),
    pytest.param("redis+sentinel://u:p@s1:1/coord?sentinel_username=watch&sentinel_password=wpw", (("s1", 1),),
                 "coord", {"username": "u", "password": "p"}, {"username": "watch", "password": "wpw"},
                 id="sentinel-credentials-apart"),
    pytest.param("redis+sentinel://s1:1/coord?socket_timeout=0.5", (("s1", 1),), "coord", {"socket_timeout": 0.5},
                 {"socket_timeout": 0.5}, id="url-timeout-wins"),
])
def test_sentinel_urls(url, sentinels, service, primary, sentinel):
    target = parse_sentinel(url, T)
    assert is_sentinel(url)
    assert target.sentinels == sentinels and target.service == service
    timeouts = {"socket_timeout": T, "socket_connect_timeout": T}
    assert target.primary == {**timeouts, **primary}
    assert target.sentinel == {**timeouts, **{k: v for k, v in primary.items() if k in timeouts}, **sentinel}


@pytest.mark.parametrize("url, says", [
    pytest.param("redis+sentinel:///coord", "no sentinel address", id="no-hosts"),
    pytest.param("redis+sentinel://s1:1", "name the service", id="no-service"),
    pytest.param("redis+sentinel://s1:1/", "name the service", id="empty-service"),
    pytest.param("redis+sentinel://s1:1/coord/x", "not a number", id="bad-db"),
    pytest.param("redis+sentinel://s1:1/coord/0/more", "name the service", id="too-deep"),
    pytest.param("redis+sentinel://s1:http/coord", "not a port", id="port-not-a-number"),
    pytest.param("redis+sentinel://s1:70000/coord", "not a port", id="port-out-of-range"),
    pytest.param("redis+sentinel://s1:1,,s2:2/coord", "empty sentinel address", id="two-commas"),
    pytest.param("redis+sentinel://:1/coord", "no host", id="no-host"),
    pytest.param("redis+sentinel://s1:1/coord?ssl_ca_certs=/ca", r"need rediss\+sentinel", id="tls-option-no-tls"),
    pytest.param("redis+sentinel://s1:1/coord?sentinel_ssl=maybe", "say yes or no", id="bad-flag"),
    pytest.param("redis+sentinel://s1:1/coord?min_other_sentinels=x", "not a number", id="bad-min"),
    pytest.param("redis+sentinel://s1:1/coord?socket_timeout=soon", "socket_timeout", id="bad-redis-py-option"),
])
def test_bad_sentinel_urls_say_why(url, says):
    with pytest.raises(ConfigError, match=says):
        parse_sentinel(url)
    with pytest.raises(RedisUnavailable, match=says):  # what every command prints, as one line
        Coord(url)


@pytest.mark.parametrize("url, shown", [
    ("redis://user:pw@h:1/0", "redis://user:***@h:1/0"),
    ("redis://:pw@h:1/0", "redis://:***@h:1/0"),
    ("redis://h:1/0", "redis://h:1/0"),
    ("redis+sentinel://u:pw@s1:1,s2:2/coord", "redis+sentinel://u:***@s1:1,s2:2/coord"),
    ("rediss+sentinel://s1:1/coord?ssl_ca_certs=%2Fca&sentinel_password=wpw",
     "rediss+sentinel://s1:1/coord?ssl_ca_certs=%2Fca&sentinel_password=***"),
])
def test_redacted(url, shown):
    assert redacted(url) == shown


@pytest.mark.parametrize("url, host", [
    ("redis://10.1.2.3:6379/0", "10.1.2.3"),
    ("redis+sentinel://u:p@10.0.0.7:26379,10.0.0.8:26379/coord", "10.0.0.7"),
    ("redis+sentinel:///coord", None),
])
def test_first_host_is_where_redis_traffic_goes(url, host):
    assert first_host(url) == host


def test_the_client_follows_the_sentinels():
    primary = client("rediss+sentinel://u:p@127.0.0.1:1,127.0.0.1:2/coord?ssl_ca_certs=/ca&min_other_sentinels=1", T)
    assert isinstance(primary, SentinelClient) and primary.watched_by is not None
    assert primary.watched_by.min_other_sentinels == 1
    assert len(primary.watched_by.sentinels) == 2
    pool = primary.connection_pool
    assert pool.service_name == "coord" and pool.is_master
    assert pool.connection_kwargs["username"] == "u" and pool.connection_kwargs["ssl_ca_certs"] == "/ca"
    assert not isinstance(client("redis://127.0.0.1:1/0", T), SentinelClient)


async def test_no_sentinel_answering_is_one_clear_line():
    """Nothing listens at the sentinels' addresses: one line naming them and the service, no password, no repr."""
    url = f"redis+sentinel://u:secret@127.0.0.1:{free_port()},127.0.0.1:{free_port()}/coord"
    coord = Coord(url, timeout=0.5)
    try:
        with pytest.raises(RedisUnavailable) as error:
            await coord.ping()
    finally:
        await coord.close()
    text = str(error.value)
    assert "no sentinel at 127.0.0.1:" in text and "'coord'" in text, text
    assert "secret" not in text and "<" not in text and "\n" not in text, text


def test_an_unknown_service_is_said_as_such():
    url = "redis+sentinel://127.0.0.1:1/nosuch"
    text = describe(MasterNotFoundError("No master found for 'nosuch'"), url)
    assert text == ("the sentinels at 127.0.0.1:1 know no live primary of service 'nosuch' (a wrong name, or a "
                    "failover under way)")


def test_a_plain_error_is_its_message():
    assert describe(TimeoutError(), "redis://h:1/0") == "TimeoutError"
