"""`swarmproxy service install|remove|show`: run the proxy as a systemd user service.

`install` writes a user unit, `swarmproxy.service`, into the user's systemd directory ($XDG_CONFIG_HOME/systemd/user,
else ~/.config/systemd/user), enables it for the user's logins and starts it, and prints each step. The unit runs
this installation's own `swarmproxy run` (the absolute path of the command that is running now: a pipx or venv
install keeps working whatever PATH the user manager has) with the `run` options given after `--`, which are checked
before anything is written. It stays off the public network (`--private-network`: no Mainline DHT, no port mapping
asked of the router) unless `--public-network` says the user wants it: an installed service starts by itself at every
login, which must not be what joins the user to a public network.

Where no systemd user manager answers (a container, an SSH session without a user bus, these test machines), enabling
is done as `systemctl --user enable` does it, a link in `default.target.wants`, and the output says the service starts
at the next login. `remove` undoes `install`: it stops and disables the unit, and deletes the link and the file.
`show` prints the unit `install` would write, and writes nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence

from .errors import ConfigError

UNIT_NAME = "swarmproxy.service"
WANTED_BY = "default.target"  # a user unit's "started at login" target
SYSTEMCTL_TIMEOUT = 30.0  # seconds: `enable --now` waits for the start, which `Type=exec` keeps short
PRIVATE = "--private-network"

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def add_command(commands: argparse._SubParsersAction) -> None:
    service = commands.add_parser(
        "service", help="run the proxy as a systemd user service (install, remove, show)",
        description="install: write a systemd user unit that runs 'swarmproxy run' with the options after '--', "
                    "enable it for your logins and start it. remove: stop, disable and delete it. show: print the "
                    "unit install would write. The service stays off the public network (--private-network) "
                    "unless --public-network is given. Example: swarmproxy service install -- --listen "
                    "127.0.0.1:8080 --store-size 20Gi",
    )
    service.add_argument("action", choices=("install", "remove", "show"))
    service.add_argument("--public-network", action="store_true",
                         help="let the service join the public BitTorrent Mainline DHT and ask the router for a "
                              "port mapping, as 'swarmproxy run' does by default (default: --private-network)")
    # What follows `--` is `run`'s (`split`): argparse cannot mix a command's flags with another command's.
    service.epilog = "Options for 'swarmproxy run' go after '--' (see swarmproxy run --help)."


def split(argv: list[str]) -> tuple[list[str], list[str]]:
    """`swarmproxy service ...` -> its own arguments, and the `run` options after the first `--`."""
    if "--" not in argv:
        return argv, []
    at = argv.index("--")
    return argv[:at], argv[at + 1:]


# -- the unit (pure) ------------------------------------------------------------------------------------------------

def quote(argument: str) -> str:
    """One ExecStart argument as systemd reads it: `%` (a specifier) doubled, `$` (a variable) doubled, and in
    double quotes with `\\` and `"` escaped when it holds whitespace, a quote, a backslash or is empty."""
    escaped = argument.replace("%", "%%").replace("$", "$$")
    if escaped and not any(c.isspace() or c in "\"'\\;" for c in escaped):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def run_arguments(options: Sequence[str], *, public: bool) -> list[str]:
    """The `run` options the unit passes: `options`, and PRIVATE unless `public`."""
    options = list(options)
    if not public and PRIVATE not in options:
        options.append(PRIVATE)
    return options


def unit_text(command: Sequence[str], options: Sequence[str]) -> str:
    """The unit file running `command` (the swarmproxy executable, or a Python and `-m proxy.cli`) `run options`."""
    exec_start = " ".join(quote(part) for part in [*command, "run", *options])
    return f"""[Unit]
Description=swarmproxy: a local HTTP proxy that finishes slow downloads from verified peer blocks
After=network-online.target
Wants=network-online.target

[Service]
# exec: started once the command runs; the proxy logs to standard error, which the journal keeps
Type=exec
ExecStart={exec_start}
Restart=on-failure
RestartSec=5s
NoNewPrivileges=yes

[Install]
WantedBy={WANTED_BY}
"""


def unit_dir(environ: dict[str, str] | os._Environ[str] = os.environ) -> pathlib.Path:
    """Where systemd looks for the user's own units: $XDG_CONFIG_HOME/systemd/user, else ~/.config/systemd/user."""
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return pathlib.Path(base) / "systemd" / "user"


def own_command() -> list[str]:
    """How the unit starts this installation: its `swarmproxy` script beside the running Python (a venv or pipx
    install), else the one `sys.argv[0]` names, else this Python with `-m proxy.cli`. Always absolute paths."""
    beside = pathlib.Path(sys.executable).parent / "swarmproxy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    invoked = pathlib.Path(sys.argv[0])
    if invoked.name == "swarmproxy" and invoked.is_file():
        return [str(invoked.resolve())]
    return [str(pathlib.Path(sys.executable).absolute()), "-m", "proxy.cli"]


def check_run_options(options: Sequence[str], parser: argparse.ArgumentParser) -> None:
    """Refuse what `swarmproxy run` would refuse at start (an unknown flag, a bad value, an unreadable config file),
    before a unit that can only fail is written; `parser` is swarmproxy's own (`proxy.cli.build_parser`, handed
    down: the command line imports this module, not the other way). The service's environment is not this shell's:
    only the options are checked, not SWARMPROXY_* variables set here."""
    from .config import OPTIONS, Config

    try:
        parsed = parser.parse_args(["run", *options])
    except SystemExit:  # argparse printed the usage error already
        raise ConfigError(f"'swarmproxy run {' '.join(options)}' is not a valid command line; nothing was "
                          "installed") from None
    try:
        Config.load({option.attr: getattr(parsed, option.attr) for option in OPTIONS}, environ={})
    except ConfigError as exc:
        raise ConfigError(f"{exc}; nothing was installed") from None


# -- the shell ------------------------------------------------------------------------------------------------------

def _systemctl(run: Runner, *args: str) -> tuple[bool, str]:
    """`systemctl --user ARGS`: whether it worked, and what it said when it did not."""
    if shutil.which("systemctl") is None:
        return False, "systemctl is not installed"
    try:
        done = run(["systemctl", "--user", *args])
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    said = (done.stderr or done.stdout or "").strip().splitlines()
    return done.returncode == 0, said[-1] if said else f"exit status {done.returncode}"


def _run_quietly(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=SYSTEMCTL_TIMEOUT, check=False)


def install(options: Sequence[str], *, public: bool, parser: argparse.ArgumentParser, say: Callable[[str], None],
            run: Runner = _run_quietly, environ: dict[str, str] | os._Environ[str] = os.environ) -> int:
    arguments = run_arguments(options, public=public)
    check_run_options(arguments, parser)
    directory = unit_dir(environ)
    path = directory / UNIT_NAME
    text = unit_text(own_command(), arguments)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        before = path.read_text() if path.exists() else None
        path.write_text(text)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    say(f"{'replaced' if before not in (None, text) else 'wrote'} {path}")
    say(f"  it runs: {text.split('ExecStart=', 1)[1].splitlines()[0]}")
    if not public:
        say("  it stays off the public network (--private-network); 'swarmproxy service install --public-network' "
            "lets it join")
    manager, why = _systemctl(run, "daemon-reload")  # fails where no user manager runs
    enabled, enable_why = _systemctl(run, "enable", UNIT_NAME)  # works without one: it only makes the link
    if not enabled and shutil.which("systemctl") is not None:
        raise ConfigError(f"systemctl --user enable {UNIT_NAME} failed: {enable_why}")
    if not enabled:  # no systemctl at all: make the link it would make
        link = directory / f"{WANTED_BY}.wants" / UNIT_NAME
        try:
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(path)
        except OSError as exc:
            raise ConfigError(f"cannot enable {UNIT_NAME} ({link}): {exc.strerror or exc}") from None
    if not manager:
        say(f"enabled {UNIT_NAME}; no systemd user manager answered ({why}): it starts at your next login, or "
            "now with 'systemctl --user start swarmproxy' in a session that has one")
        return 0
    started, why = _systemctl(run, "restart", UNIT_NAME)  # restart: a replaced unit runs its new command line
    if not started:
        raise ConfigError(f"enabled {UNIT_NAME}, but it did not start: {why} (see journalctl --user -u swarmproxy)")
    say(f"enabled and started {UNIT_NAME}: 'systemctl --user status swarmproxy' shows it, "
        "'journalctl --user -u swarmproxy' its log")
    say("  it starts at your login; to keep it running while you are logged out: loginctl enable-linger")
    return 0


def remove(*, say: Callable[[str], None], run: Runner = _run_quietly,
           environ: dict[str, str] | os._Environ[str] = os.environ) -> int:
    directory = unit_dir(environ)
    path, link = directory / UNIT_NAME, directory / f"{WANTED_BY}.wants" / UNIT_NAME
    if not path.exists() and not link.is_symlink():
        say(f"no swarmproxy service is installed ({path} does not exist): nothing to do")
        return 0
    stopped, why = _systemctl(run, "disable", "--now", UNIT_NAME)
    if stopped:
        say(f"stopped and disabled {UNIT_NAME}")
    else:  # no user manager to stop it: disabling alone still works (it removes the link)
        disabled, _ = _systemctl(run, "disable", UNIT_NAME)
        say(f"{'disabled' if disabled else 'could not disable'} {UNIT_NAME}; no systemd user manager answered "
            f"({why}), so nothing was stopped")
    for gone in (link, path):
        try:
            if gone.is_symlink() or gone.exists():
                gone.unlink()
                say(f"removed {gone}")
        except OSError as exc:
            raise ConfigError(f"cannot remove {gone}: {exc.strerror or exc}") from None
    with contextlib.suppress(OSError):
        link.parent.rmdir()  # only if empty: another unit's link keeps it
    if stopped:
        _systemctl(run, "daemon-reload")
    return 0


def run(args: argparse.Namespace, run_options: list[str], parser: argparse.ArgumentParser) -> int:
    def say(line: str) -> None:
        print(line, file=sys.stderr)

    if args.action == "show":
        arguments = run_arguments(run_options, public=args.public_network)
        check_run_options(arguments, parser)
        sys.stdout.write(unit_text(own_command(), arguments))
        return 0
    if args.action == "install":
        return install(run_options, public=args.public_network, parser=parser, say=say)
    if run_options or args.public_network:
        raise ConfigError("'swarmproxy service remove' takes no options")
    return remove(say=say)
