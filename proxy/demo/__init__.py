"""`swarmproxy demo` and the local fixtures it runs, apart from the proxy's own modules.

    command.py      the `swarmproxy demo` command: a slow download made fast, on this machine
    slow_origin.py  SlowOrigin, a deliberately overloaded local origin
    local_swarm.py  Cluster, several full nodes in one event loop on 127.0.0.x

The fixtures live in the product because the demo ships with it; the tests and the lab (bench/) use them too.
Nothing in the proxy's core imports this package except the CLI.
"""

from .command import add_command, run

__all__ = ["add_command", "run"]
