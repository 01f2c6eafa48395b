"""The `swarmproxy` command.

    swarmproxy run      run the proxy (defaults: 127.0.0.1:8080)
    swarmproxy status   ask a running proxy how it is doing
    swarmproxy get      download a URL (https too) through a running proxy (see proxy/get_command.py)
    swarmproxy ca       print or renew the local CA of --mitm-hosts (see proxy/ca_command.py)
    swarmproxy torrent  export a shared download as a BitTorrent v2 torrent (see proxy/torrent_command.py)
    swarmproxy demo     a slow download made fast, on this machine, with no setup
    swarmproxy service  run the proxy as a systemd user service (see proxy/service_command.py)
    swarmproxy swarm    block engine commands (see swarm/cli.py)

and whatever installed code adds through the entry-point group "swarmproxy.commands": `swarmproxy lab` (the
thesis experiments) is bench's, declared in pyproject.toml. The product never imports bench by name, so it runs
without the lab and the lab's dependencies (the `lab` extra).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from importlib import metadata
from typing import Any

from swarm import cli as swarm_cli

from . import __version__, ca_command, demo, get_command, service_command, torrent_command
from .config import OPTIONS, Config, HostPort, running_proxy
from .errors import ConfigError, ListenError

log = logging.getLogger("swarmproxy")

# Entry points in this group are commands `swarmproxy NAME ARGS...`: each names a function main(argv) -> int
# that parses ARGS itself, and whose docstring's first line is NAME's line in `swarmproxy --help`.
COMMAND_GROUP = "swarmproxy.commands"
# a plugin cannot take these names
CORE_COMMANDS = ("run", "status", "get", "ca", "torrent", "demo", "service", "swarm")
# `swarmproxy run`'s log lines: only these fields are ever shown (see `_run`, which skips gathering the others).
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _default_text(option) -> str:
    default = option.default
    if option.attr == "connect_ports":
        return "443"
    if option.attr == "data_dir":
        return "$XDG_DATA_HOME/swarmproxy"
    if option.attr == "bootstrap":
        return "none"
    if option.attr == "min_rate":
        return "160k"
    if option.attr == "store_size":
        return "10Gi"
    if option.attr == "block_size":
        return "auto"
    if option.attr == "bt_listen":
        return "off"
    if option.attr == "mainline_bootstrap":
        return "the public routers"
    if default is None or default == ():
        return "none"
    if isinstance(default, bool):
        return "true" if default else "false"
    return str(default)


def plugin_commands() -> dict[str, metadata.EntryPoint]:
    """The commands installed code declares, by name (the first of a name wins; core names are never taken)."""
    found: dict[str, metadata.EntryPoint] = {}
    for entry in metadata.entry_points(group=COMMAND_GROUP):
        if entry.name not in CORE_COMMANDS:
            found.setdefault(entry.name, entry)
    return found


def _load(entry: metadata.EntryPoint) -> Callable[[list[str]], int]:
    """The command's main; a ConfigError (one line for the user) when it cannot be loaded."""
    try:
        command = entry.load()
    except Exception as exc:  # noqa: BLE001 - any failure to load a plugin is one line, never a traceback
        raise ConfigError(f"the {entry.name} command ({entry.value}) cannot be loaded: "
                          f"{type(exc).__name__}: {exc}") from None
    if not callable(command):
        raise ConfigError(f"the {entry.name} command ({entry.value}) is not a function")
    return command


def _summary(entry: metadata.EntryPoint) -> str:
    try:
        doc = _load(entry).__doc__ or ""
    except ConfigError as exc:
        return f"(unavailable: {exc})"
    return doc.strip().split("\n", 1)[0]


class _Commands(argparse._SubParsersAction):
    """A command's flags it does not know are its own usage error: argparse hands them back to the top level, whose
    usage (`swarmproxy [-h] [--version] COMMAND ...`) says nothing of what `run --bogus` got wrong."""

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        # where argparse puts a command's leftovers for the top level (private, unchanged from 3.7 to 3.13)
        extra = vars(namespace).pop(argparse._UNRECOGNIZED_ARGS_ATTR, None)
        if extra:
            self.choices[values[0]].error(f"unrecognized arguments: {' '.join(extra)}")


class CommandParser(argparse.ArgumentParser):
    """The parser of `swarmproxy` and of every command under it (argparse makes subparsers of the parent's class).

    A parser with commands given none of them prints its help, the list of its commands, where argparse would say
    only "the following arguments are required: COMMAND": bare `swarmproxy` is a newcomer's first try."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _Commands)

    def parse_known_args(self, args=None, namespace=None):
        commands = [a for a in self._actions if isinstance(a, _Commands) and a.required]
        if commands and not (sys.argv[1:] if args is None else list(args)):
            self.print_help(sys.stderr)
            self.exit(2)
        return super().parse_known_args(args, namespace)


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="swarmproxy",
        description="A local HTTP forward proxy: point a browser or curl at it "
                    "(curl --proxy http://127.0.0.1:8080 URL).",
    )
    parser.add_argument("--version", action="version", version=f"swarmproxy {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run = commands.add_parser(
        "run", help="run the proxy",
        description="Run the proxy until interrupted (Ctrl-C or SIGTERM). Every option can also be set "
                    "in a TOML file (--config) or as an environment variable SWARMPROXY_<NAME> "
                    "(e.g. SWARMPROXY_LISTEN=127.0.0.1:9090); flags win over the environment, which wins "
                    "over the file.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for option in OPTIONS:
        kwargs: dict[str, Any] = {"dest": option.attr, "default": None, "metavar": option.metavar}
        help_text = f"{option.help} (default: {_default_text(option)}"
        help_text += ")" if option.flag_only else f"; env {option.env})"
        if option.parse.__name__ == "_parse_bool":
            kwargs = {"dest": option.attr, "default": None, "action": "store_const", "const": True}
        elif option.repeatable:
            kwargs["action"] = "append"
        run.add_argument(f"--{option.name}", help=help_text, **kwargs)

    status = commands.add_parser(
        "status", help="print a running proxy's status",
        description="Print the JSON status of a running proxy (its /_swarm/status) and exit non-zero "
                    "when none answers. The same, live in a browser, with the downloads, peers and plots: "
                    "http://HOST:PORT/_swarm/ (the status page).",
    )
    status.add_argument("--proxy", default=None, metavar="HOST:PORT",
                        help="where the proxy listens (default: SWARMPROXY_LISTEN, else 127.0.0.1:8080)")
    status.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                        help="how long to wait for an answer (default: 5)")
    get_command.add_command(commands)
    ca_command.add_command(commands)
    torrent_command.add_command(commands)
    demo.add_command(commands)
    service_command.add_command(commands)
    swarm_cli.add_commands(commands)
    for name, entry in plugin_commands().items():
        # listed only: main() hands `swarmproxy NAME ...` to the plugin before this parser sees it
        commands.add_parser(name, help=_summary(entry), add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    plugins = plugin_commands()
    if argv and argv[0] in plugins:
        return _run_plugin(plugins[argv[0]], argv[1:])
    parser = build_parser()
    run_options: list[str] = []
    if argv[:1] == ["service"]:
        argv, run_options = service_command.split(argv)
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "status":
            return _status(args)
        if args.command == "get":
            return get_command.run(args)
        if args.command == "ca":
            return ca_command.run(args)
        if args.command == "torrent":
            return torrent_command.run(args)
        if args.command == "demo":
            return demo.run(args)
        if args.command == "service":
            return service_command.run(args, run_options, parser)
        if args.command == "swarm":
            return swarm_cli.run(args)
    except ConfigError as exc:
        print(f"swarmproxy: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    parser.error(f"unknown command {args.command}")
    return 2


def _run_plugin(entry: metadata.EntryPoint, argv: list[str]) -> int:
    try:
        return _load(entry)(argv)
    except ConfigError as exc:
        print(f"swarmproxy: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _run(args: argparse.Namespace) -> int:
    flags = {option.attr: getattr(args, option.attr) for option in OPTIONS}
    config = Config.load(flags)
    logging.basicConfig(level=config.log_level, format=LOG_FORMAT, stream=sys.stderr)
    # What the format never shows is not gathered for each record (the logging HOWTO's "Optimization"): the access
    # log writes a line per request, and the caller's frame, thread and process were half of its cost.
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    try:
        config.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create data dir {config.data_dir}: {exc.strerror}") from None
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(_serve(config))


def _loop_factory():
    """uvloop when installed (faster socket I/O for the relay), else asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


async def _serve(config: Config) -> int:
    from .server import ProxyServer  # aiohttp import is slow; keep `--help` fast

    server = ProxyServer(config)
    log.debug("event loop: %s", type(asyncio.get_running_loop()).__module__)
    try:
        await server.start()
    except OSError as exc:
        print(f"swarmproxy: cannot listen on {config.listen}: {exc.strerror or exc}", file=sys.stderr)
        await server.stop()
        return 1
    except ListenError as exc:
        print(f"swarmproxy: {exc}", file=sys.stderr)
        await server.stop()
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping")
    await server.stop()
    return 0


def _status(args: argparse.Namespace) -> int:
    where: HostPort = running_proxy(args.proxy)
    url = f"http://{where}/_swarm/status"
    # No proxy for this request, whatever http_proxy says: we are asking the proxy itself.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=args.timeout) as response:
            data = json.load(response)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        print(f"swarmproxy: no proxy answers at {where}: {reason}", file=sys.stderr)
        return 1
    print(json.dumps(data, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
