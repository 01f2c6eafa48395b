"""A local HTTPS origin for the tests: `SlowOrigin` over TLS with a leaf of a throwaway CA (trustme), and the
nodes that trust that CA through --ca-file (tests/proxy/test_fetch_https.py, test_mitm.py)."""

from __future__ import annotations

import pathlib
import ssl

import trustme

from proxy.demo.local_swarm import Cluster
from proxy.demo.slow_origin import SlowOrigin


async def tls_origin(ca: trustme.CA, *names: str, **validity) -> SlowOrigin:
    """A started origin presenting a leaf of `ca` for `names` (`not_before`/`not_after` make a bad one)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert(*names, **validity).configure_cert(context)
    origin = SlowOrigin()
    await origin.start(ssl_context=context)
    return origin


def trusting_cluster(tmp_path: pathlib.Path, ca: trustme.CA, **settings: str) -> Cluster:
    """Nodes that trust `ca` for origins (--ca-file), besides the system's store."""
    ca_file = tmp_path / "origin-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    return Cluster(tmp_path, ca_file=str(ca_file), **settings)
