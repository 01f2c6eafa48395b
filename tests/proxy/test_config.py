"""Option layers: defaults < TOML file < SWARMPROXY_* environment < command-line flags."""

import pathlib

import pytest

from proxy.config import OPTIONS, Config, HostPort, parse_connect_ports, parse_host_port
from proxy.errors import ConfigError


def test_defaults(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    config = Config.load({}, environ={})
    assert config.listen == HostPort("127.0.0.1", 8080)
    assert config.connect_ports == frozenset({443})
    assert config.data_dir == tmp_path / "swarmproxy"
    assert config.log_level == "INFO"


def test_layers_flags_win_over_env_over_file(tmp_path):
    file = tmp_path / "c.toml"
    file.write_text('listen = "127.0.0.1:1111"\nconnect-ports = [443, 8443]\nlog_level = "debug"\n'
                    'read-timeout = 7\n')
    env = {"SWARMPROXY_LISTEN": "127.0.0.1:2222", "SWARMPROXY_CONNECT_PORTS": "*"}
    config = Config.load({"config": str(file), "listen": "127.0.0.1:3333"}, environ=env)
    assert config.listen.port == 3333  # flag
    assert config.connect_ports is None  # env beats file
    assert config.log_level == "DEBUG"  # file beats default
    assert config.read_timeout == 7.0
    assert Config.load({"config": str(file)}, environ={}).connect_ports == frozenset({443, 8443})


def test_config_file_named_by_env(tmp_path):
    file = tmp_path / "c.toml"
    file.write_text('max-connections = 10\n')
    assert Config.load({}, environ={"SWARMPROXY_CONFIG": str(file)}).max_connections == 10


@pytest.mark.parametrize("content,needle", [
    ("listen = ", "not valid TOML"),
    ("colour = 1\n", "unknown option 'colour'"),
    ('listen = "nope"\n', "listen"),
    ("max-connections = 0\n", "greater than 0"),
    ('connect-ports = "http"\n', "not a port number"),
    ('log-level = "loud"\n', "log level"),
    ("min-rate = -1\n", r"c\.toml: min-rate: -1 must not be negative"),  # the file's spelling, not min_rate
    ("min_rate = -1\n", r"c\.toml: min-rate: "),
    ('trust = "bogus"\n', r"c\.toml: trust: must be 'origin'"),
])
def test_bad_config_files_say_what_is_wrong(tmp_path, content, needle):
    file = tmp_path / "c.toml"
    file.write_text(content)
    with pytest.raises(ConfigError, match=needle):
        Config.load({"config": str(file)}, environ={})


@pytest.mark.parametrize("flags,environ,message", [
    ({"trust": "bogus"}, {}, "--trust: must be 'origin', 'any' or 'quorum:N' with N from 1 to 16, got 'bogus'"),
    ({}, {"SWARMPROXY_TRUST": "bogus"}, "SWARMPROXY_TRUST: must be 'origin'"),
    ({"transport": "x"}, {}, "--transport: 'x' is not one of tcp, quic, both"),
    ({"min_rate": "-1"}, {}, "--min-rate: '-1' must not be negative"),
])
def test_flag_errors_name_the_option_once(flags, environ, message):
    with pytest.raises(ConfigError) as caught:
        Config.load(flags, environ=environ)
    assert str(caught.value).startswith(message)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        Config.load({"config": str(tmp_path / "none.toml")}, environ={})


def test_non_loopback_listen_requires_allow_remote():
    with pytest.raises(ConfigError, match="--allow-remote"):
        Config.load({"listen": "0.0.0.0:8080"}, environ={})
    assert Config.load({"listen": "0.0.0.0:8080", "allow_remote": True}, environ={}).listen.host == "0.0.0.0"
    assert Config.load({"listen": "[::1]:0"}, environ={}).listen == HostPort("::1", 0)


@pytest.mark.parametrize("text,expected", [
    ("127.0.0.1:8080", HostPort("127.0.0.1", 8080)), (":0", HostPort("127.0.0.1", 0)),
    ("9090", HostPort("127.0.0.1", 9090)), ("[::1]:80", HostPort("::1", 80)),
    ("localhost:1", HostPort("localhost", 1)),
])
def test_parse_host_port(text, expected):
    assert parse_host_port(text) == expected


@pytest.mark.parametrize("text", ["a:b", "1.2.3.4:70000", "host:"])
def test_parse_host_port_rejects(text):
    with pytest.raises(ConfigError):
        parse_host_port(text)


@pytest.mark.parametrize("text,expected", [("443", {443}), ("443, 8443", {443, 8443}), ("*", None),
                                           ("443,*", None), ("", set())])
def test_parse_connect_ports(text, expected):
    result = parse_connect_ports(text)
    assert (result if result is None else set(result)) == expected


def test_every_option_documented_in_readme():
    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    for option in OPTIONS:
        assert f"--{option.name}" in readme, option.name
        if not option.flag_only:
            assert option.env in readme, option.env


@pytest.mark.parametrize("text,expected", [("auto", None), ("AUTO", None), ("16Ki", 16384), ("64ki", 65536),
                                           ("64k", 65536), ("64K", 65536), ("1Mi", 1 << 20), ("4M", 4 << 20),
                                           ("4Mi", 4 << 20), ("131072", 131072)])
def test_block_size(text, expected):
    assert Config.load({"block_size": text}, environ={}).block_size == expected


@pytest.mark.parametrize("text", ["8Ki", "8k", "48Ki", "8Mi", "16Mi", "16M", "0", "-16Ki", "big", "16.5Ki"])
def test_block_size_rejects_what_is_not_a_power_of_two_from_16ki_to_4mi(text):
    with pytest.raises(ConfigError, match="--block-size: block size .* is not auto or a power of two from 16Ki to "
                                          "4Mi"):
        Config.load({"block_size": text}, environ={})


# Every size option reads k, M, G as powers of 1024 (swarm.content.sizes); a rate reads them as powers of 1000.
@pytest.mark.parametrize("attr,text,expected", [
    ("store_size", "10G", 10 << 30), ("store_size", "10Gi", 10 << 30), ("store_size", "1500M", 1500 << 20),
    ("discover_size", "16M", 16 << 20), ("discover_size", "0", 0), ("discover_size", "100k", 102_400),
    ("max_header_size", "64k", 65536), ("max_header_size", "8192", 8192),
    ("min_rate", "160k", 160_000), ("min_rate", "160Ki", 163_840), ("min_rate", "0", 0),
])
def test_sizes_are_binary_and_rates_decimal(attr, text, expected):
    assert getattr(Config.load({attr: text}, environ={}), attr) == expected


@pytest.mark.parametrize("flags,message", [
    ({"store_size": "0"}, "--store-size: '0' must be greater than 0"),
    ({"store_size": "lots"}, "--store-size: 'lots' is not a size (e.g. "),
    ({"discover_size": "-1k"}, "--discover-size: '-1k' must not be negative"),
    ({"max_header_size": "0"}, "--max-header-size: '0' must be greater than 0"),
    ({"min_rate": "fast"}, "--min-rate: 'fast' is not a rate in bytes/s"),
])
def test_bad_sizes_name_the_option(flags, message):
    with pytest.raises(ConfigError) as caught:
        Config.load(flags, environ={})
    assert str(caught.value).startswith(message)


def test_block_size_and_fetch_peers_defaults_and_layers():
    config = Config.load({}, environ={})
    assert config.block_size is None and config.fetch_peers == 16
    config = Config.load({}, environ={"SWARMPROXY_BLOCK_SIZE": "256Ki", "SWARMPROXY_FETCH_PEERS": "4"})
    assert config.block_size == 256 * 1024 and config.fetch_peers == 4


@pytest.mark.parametrize("text", ["0", "-1", "two", "1.5"])
def test_fetch_peers_rejects_what_is_not_a_positive_whole_number(text):
    with pytest.raises(ConfigError, match="--fetch-peers"):
        Config.load({"fetch_peers": text}, environ={})


def test_header_and_idle_timeouts_defaults_and_layers():
    config = Config.load({}, environ={})
    assert (config.header_timeout, config.idle_timeout) == (10.0, 60.0)
    config = Config.load({"idle_timeout": "5"}, environ={"SWARMPROXY_HEADER_TIMEOUT": "0.25"})
    assert (config.header_timeout, config.idle_timeout) == (0.25, 5.0)


@pytest.mark.parametrize("name", ["header_timeout", "idle_timeout"])
@pytest.mark.parametrize("text", ["0", "-1", "soon", "inf"])
def test_header_and_idle_timeouts_must_be_positive_numbers(name, text):
    with pytest.raises(ConfigError, match="--" + name.replace("_", "-")):
        Config.load({name: text}, environ={})


def test_local_domains_and_shared_private_origins_default_empty_and_layer(tmp_path):
    config = Config.load({}, environ={})
    assert config.local_domains == () and config.share_private_origins == ()
    file = tmp_path / "c.toml"
    file.write_text('local-domains = ["corp.example.com", "*.Lan.Example."]\n'
                    'share-private-origins = ["10.0.0.5", "[fd00::7]:80"]\n')
    from_file = Config.load({"config": str(file)}, environ={})
    assert from_file.local_domains == ("corp.example.com", "lan.example")
    assert from_file.share_private_origins == (("10.0.0.5", None), ("fd00::7", 80))
    env = {"SWARMPROXY_LOCAL_DOMAINS": "office.example", "SWARMPROXY_SHARE_PRIVATE_ORIGINS": "192.168.1.20:8080"}
    from_env = Config.load({"config": str(file)}, environ=env)
    assert from_env.local_domains == ("office.example",)
    assert from_env.share_private_origins == (("192.168.1.20", 8080),)
    flags = Config.load({"config": str(file), "share_private_origins": "[::ffff:127.0.0.1]:8080,127.0.0.1:8080"},
                        environ=env)
    assert flags.share_private_origins == (("127.0.0.1", 8080),)  # one spelling, once


@pytest.mark.parametrize("text,expected", [
    ("10.0.0.5", (("10.0.0.5", None),)),
    ("10.0.0.5:8080, 169.254.1.1", (("10.0.0.5", 8080), ("169.254.1.1", None))),
    ("[fd00::7]", (("fd00::7", None),)),
    ("[fe80::1%eth0]:443", (("fe80::1", 443),)),
    ("127.0.0.1:80,", (("127.0.0.1", 80),)),
    ("", ()),
])
def test_share_private_origins(text, expected):
    assert Config.load({"share_private_origins": text}, environ={}).share_private_origins == expected


@pytest.mark.parametrize("text,message", [
    ("nas.lan", "'nas.lan' is not an IP address"),
    ("8.8.8.8", "'8.8.8.8' is a public address"),
    ("0.0.0.0", "'0.0.0.0' is a special-purpose address"),
    ("fd00::7", "write an IPv6 address in brackets"),
    ("10.0.0.5:0", "'0' is not a port number"),
    ("10.0.0.5:70000", "'70000' is not a port number"),
    ("[fd00::7]80", "is not ADDRESS, ADDRESS:PORT or [IPV6]:PORT"),
])
def test_share_private_origins_errors_say_what_is_wrong(text, message):
    with pytest.raises(ConfigError) as caught:
        Config.load({"share_private_origins": text}, environ={})
    assert str(caught.value).startswith("--share-private-origins: ") and message in str(caught.value)


@pytest.mark.parametrize("text,message", [
    ("10.0.0.1", "is an IP address"), ("a b.example", "is not a domain name"), ("-x.example", "is not a domain name"),
    ("x..example", "is not a domain name"),
])
def test_local_domains_errors_say_what_is_wrong(text, message):
    with pytest.raises(ConfigError, match=f"^--local-domains: .*{message}"):
        Config.load({"local_domains": text}, environ={})


@pytest.mark.parametrize(("flag", "environ", "expected"), [
    ("127.0.0.1:9000", {"SWARMPROXY_LISTEN": "127.0.0.1:9100"}, "127.0.0.1:9000"),  # --proxy wins
    (None, {"SWARMPROXY_LISTEN": "127.0.0.1:9100"}, "127.0.0.1:9100"),
    (None, {}, "127.0.0.1:8080"),  # run's default
])
def test_where_the_commands_that_ask_a_running_proxy_look_for_it(flag, environ, expected):
    from proxy.config import running_proxy

    assert str(running_proxy(flag, environ)) == expected
