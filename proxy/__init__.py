"""swarmproxy's HTTP edge: the forward proxy, CONNECT tunnels, the admin API and the CLI.

`proxy` may import `swarm` and `dht`; nothing imports `proxy`.
"""

__version__ = "0.1.0"
