"""What the namespace labs share (`bench.cluster_netns`, `bench.internet_netns`): finding the tools where a user's PATH
lacks /usr/sbin, running one with a bound on its time, tearing down what a lab made, its processes first (a
namespace outlives its name while a process is in it), and letting namespaces choose a TCP congestion control."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

__all__ = ["ALLOWED_CC", "AVAILABLE_CC", "READ_TIMEOUT", "allow_congestion", "run", "tear_down", "tool"]

READ_TIMEOUT = 10.0  # s for one `ip`/`tc`/`iptables`/`nft` command
END_TIMEOUT = 15.0  # s for a killed process to be reaped


def tool(name: str) -> str | None:
    """`ip`, `tc`, `iptables` and the like live in /usr/sbin, which a user's PATH may lack."""
    return shutil.which(name, path=os.pathsep.join((os.environ.get("PATH", ""), "/usr/sbin", "/sbin")))


def run(*argv: str, stdin: str | None = None) -> str:
    """Run one command; its output, or a RuntimeError with what it said."""
    argv = (tool(argv[0]) or argv[0], *argv[1:])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=READ_TIMEOUT, input=stdin)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def tear_down(processes: list[subprocess.Popen], namespaces: list[str]) -> None:
    """Kill and reap every process, then delete the namespaces, newest first; both lists end empty. Nothing here
    raises: it runs however a lab ends."""
    for process in processes:
        if process.poll() is None:
            process.kill()
    for process in processes:
        try:
            process.wait(timeout=END_TIMEOUT)
        except subprocess.TimeoutExpired:
            pass
    for ns in reversed(namespaces):
        subprocess.run([tool("ip") or "ip", "netns", "del", ns], capture_output=True, timeout=READ_TIMEOUT)
    namespaces.clear()


ALLOWED_CC = pathlib.Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
AVAILABLE_CC = pathlib.Path("/proc/sys/net/ipv4/tcp_available_congestion_control")


def allow_congestion(name: str) -> str | None:
    """Let a namespace make `name` its default TCP congestion control: Linux lets a namespace other than the
    machine's choose only from the machine's allowed list (else EPERM), so add `name` to it; the list as it was,
    for `Topology.close` to put back, or None when `name` was already allowed."""
    if name not in AVAILABLE_CC.read_text().split():
        raise RuntimeError(f"TCP congestion control {name!r} is not available here (available: "
                           f"{AVAILABLE_CC.read_text().strip()}; modprobe tcp_{name}?)")
    before = ALLOWED_CC.read_text().strip()
    if name in before.split():
        return None
    ALLOWED_CC.write_text(f"{before} {name}")
    return before
