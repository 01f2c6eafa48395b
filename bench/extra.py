"""The `lab` extra: what bench/ needs beyond the product, and the one message that says how to get it.

matplotlib (the lab's figures) is an optional extra in pyproject.toml, so that `bash scripts/run.sh` installs the
proxy without it; libtorrent (the BitTorrent baseline of `swarmproxy lab largefile` and bench/transport.py) is
checked too, though the product now installs it (the BitTorrent bridge). Code that needs one calls `require()` (or
checks `missing()` first), and a user without the extra reads what to install instead of a traceback.
"""

from __future__ import annotations

import importlib
import pathlib
import sys
from types import ModuleType

LAB = ("libtorrent", "matplotlib")


class ExtraMissing(ImportError):
    """A module of the `lab` extra does not import; str() is the message for the user."""


def missing(modules: tuple[str, ...] = LAB) -> dict[str, str]:
    """The modules among `modules` that do not import here, with why (an import, not a lookup: a wheel that is
    installed but cannot load, e.g. a missing shared library, is as missing as one never installed)."""
    failed = {}
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            # why, unless it is plain absence: a broken install's reason (a shared library) is worth reading
            failed[name] = "" if isinstance(exc, ModuleNotFoundError) and exc.name == name else str(exc)
    return failed


def message(failed: dict[str, str], who: str = "swarmproxy lab") -> str:
    """One line: what is missing, and the command that installs it into the Python running this."""
    names = ", ".join(f"{name} ({why})" if why else name for name, why in sorted(failed.items()))
    return (f"{who}: needs the lab extra ({', '.join(LAB)}), missing here: {names}. "
            f"Install it: {install_command(lab_script=who == 'swarmproxy lab')}")


def install_command(lab_script: bool = False) -> str:
    python = sys.executable or "python3"
    tree = pathlib.Path(__file__).resolve().parent.parent
    if not (tree / "pyproject.toml").is_file():  # installed from a wheel, not run from a clone
        return f"{python} -m pip install 'swarmproxy[lab]'"
    pip = f"{python} -m pip install -e '{tree}[lab]'"  # editable, as scripts/bootstrap.sh installs a clone
    if lab_script:
        return f"bash {tree / 'scripts' / 'lab.sh'} ARGS (installs it into .venv, then runs the lab), or {pip}"
    return pip


def require(name: str, who: str = "swarmproxy lab") -> ModuleType:
    """Import `name`, one of the extra's modules, or raise ExtraMissing saying what to install."""
    failed = missing((name,))
    if failed:
        raise ExtraMissing(message(failed, who))
    return importlib.import_module(name)
