"""`swarmproxy ca export|rotate`: the local CA of `--mitm-hosts` (`proxy.local_ca`), for the user to trust or renew.

`export` prints the CA certificate (PEM) on standard output and, on standard error, how to make curl, Debian,
Firefox and Chromium trust it; `rotate` makes a new CA for the hosts listed now (the old one's name constraints
cannot change) and forgets the old leaves. Both read --data-dir and --mitm-hosts from the flags, the environment
or the config file, as `swarmproxy run` does.
"""

from __future__ import annotations

import argparse
import sys

from .config import Config
from .errors import ConfigError


def add_command(commands: argparse._SubParsersAction) -> None:
    ca = commands.add_parser(
        "ca", help="print or renew the local CA that --mitm-hosts uses",
        description="The local CA that terminates CONNECTs to the hosts of --mitm-hosts. 'export' prints its "
                    "certificate (made now if there is none yet) and how to trust it; 'rotate' replaces it with a "
                    "new one for the hosts listed now (needed after changing --mitm-hosts) and forgets its leaves.",
    )
    ca.add_argument("action", choices=("export", "rotate"))
    ca.add_argument("--data-dir", default=None, metavar="DIR", help="the proxy's data dir (as for swarmproxy run)")
    ca.add_argument("--config", default=None, metavar="FILE", help="the proxy's TOML config file")
    ca.add_argument("--mitm-hosts", default=None, metavar="LIST",
                    help="the hosts the CA may sign for (default: SWARMPROXY_MITM_HOSTS or the config file)")


def run(args: argparse.Namespace) -> int:
    from .local_ca import LocalCA, constrained_domains  # cryptography's import is slow

    config = Config.load({"data_dir": args.data_dir, "config": args.config, "mitm_hosts": args.mitm_hosts})
    directory = config.data_dir / "ca"
    if not config.mitm_hosts and not (directory / "ca.pem").exists():
        raise ConfigError("no host is listed: give --mitm-hosts (e.g. '*.debian.org') or set mitm-hosts in the "
                          "config file, as for swarmproxy run")
    if args.action == "rotate":
        ca = LocalCA(directory, config.mitm_hosts, new=True)
        print(f"a new local CA for {', '.join(constrained_domains(ca.patterns))} is in {ca.cert_path}; trust it "
              "again (swarmproxy ca export) and restart the proxy", file=sys.stderr)
        return 0
    ca = LocalCA(directory, config.mitm_hosts)
    sys.stdout.write(ca.pem())
    path = ca.cert_path
    print(f"""
This CA ({path}) can only sign for: {', '.join(constrained_domains(ca.patterns))}. Its key stays in {ca.key_path}.
Trust it where you want those hosts' HTTPS downloads to swarm through the proxy:
  curl:      curl --cacert {path} --proxy http://127.0.0.1:8080 https://HOST/FILE
  Debian:    sudo cp {path} /usr/local/share/ca-certificates/swarmproxy.crt && sudo update-ca-certificates
  Firefox:   Settings > Privacy & Security > Certificates > View Certificates > Authorities > Import
             (or enterprise policy: "Certificates": {{"Install": ["{path}"]}})
  Chromium:  certutil -d sql:$HOME/.pki/nssdb -A -t "C,," -n swarmproxy -i {path}""", file=sys.stderr)
    return 0
