"""Names the local CA of `--mitm-hosts` must not sign (issue 35 §6), tried against a tree's CA and TLS listener.

The CA of --tree (default: this checkout; `proxy.local_ca` and `proxy.mitm`) is made in a temporary directory for
`--mitm-hosts '*.swarm.test'`, its listener (`proxy.mitm.Interceptor`) started on 127.0.0.1 port 0, and each row
sent the way a client of the proxy can: a CONNECT target (`Interceptor.wants` and `open`, what the proxy's
CONNECT handler calls), then a raw TLS 1.2 ClientHello whose SNI is the name, bytes as given (an ssl client
would IDNA-encode it and refuse `../`; OpenSSL's server takes any SNI without a NUL). Each row prints what
happened: refused (and the log line saying why), a leaf minted (the server answered with a ServerHello), and
every file created, changed or deleted outside the CA's leaves/ directory. Then the leaf cache is made to
evict everything, to show whether an eviction deletes a file outside; and a CA for '*.0.0.10' is asked for the
IP literal 127.0.0.10. Nothing leaves loopback; no name is resolved.

    python -m bench.attacks.ca_names [--tree DIR]

To measure the code before a change without touching the work tree:

    mkdir /tmp/base35 && git archive HEAD proxy | tar -x -C /tmp/base35
    python -m bench.attacks.ca_names --tree /tmp/base35
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib
import inspect
import logging
import os
import pathlib
import struct
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parents[2]
DOMAIN = "swarm.test"  # .test is reserved (RFC 2606): never a real name
GOOD = f"ok.{DOMAIN}"
VICTIM = "precious bytes that are not a certificate\n"


def client_hello(sni: bytes) -> bytes:
    """One TLS 1.2 ClientHello record naming `sni` in its server_name extension, as bytes on the wire, so that any
    name can be sent. It offers ECDHE-ECDSA with P-256, which a leaf of the local CA can answer."""
    def ext(kind: int, body: bytes) -> bytes:
        return struct.pack("!HH", kind, len(body)) + body

    def vec16(body: bytes) -> bytes:
        return struct.pack("!H", len(body)) + body

    extensions = (
        ext(0x0000, vec16(b"\x00" + vec16(sni)))  # server_name: one host_name entry
        + ext(0x000A, vec16(struct.pack("!HH", 0x0017, 0x001D)))  # supported_groups: secp256r1, x25519
        + ext(0x000B, b"\x01\x00")  # ec_point_formats: uncompressed
        + ext(0x000D, vec16(struct.pack("!HHH", 0x0403, 0x0804, 0x0401)))  # signature_algorithms
    )
    suites = struct.pack("!HHHH", 0xC02B, 0xC02C, 0xC02F, 0xC030)  # ECDHE-{ECDSA,RSA}-AES-GCM
    body = (b"\x03\x03" + hashlib.sha256(sni).digest() + b"\x00" + vec16(suites) + b"\x01\x00"
            + vec16(extensions))
    handshake = b"\x01" + len(body).to_bytes(3, "big") + body
    return b"\x16\x03\x01" + vec16(handshake)


async def answer_to_hello(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, sni: bytes) -> str:
    """'server_hello' (a leaf was presented), 'alert N' (refused) or 'closed', for one ClientHello."""
    writer.write(client_hello(sni))
    await writer.drain()
    try:
        head = await asyncio.wait_for(reader.readexactly(7), 10)
    except (asyncio.IncompleteReadError, ConnectionError):
        return "closed"
    if head[0] == 0x16 and head[5] == 0x02:
        return "server_hello"
    if head[0] == 0x15:
        return f"alert {head[6]}"
    return f"record {head[0]}"


def load(tree: pathlib.Path):
    """`proxy.local_ca` and `proxy.mitm` of `tree` (first on sys.path, so its `proxy` wins)."""
    sys.path.insert(0, str(tree))
    local_ca, mitm = importlib.import_module("proxy.local_ca"), importlib.import_module("proxy.mitm")
    if pathlib.Path(local_ca.__file__).resolve().parents[1] != tree:
        raise SystemExit(f"imported {local_ca.__file__}, not the local CA of {tree}")
    return local_ca, mitm


class _Lines(logging.Handler):
    """The proxy's log lines, so that a row can show why it was refused."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _snapshot(root: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _changes(before: dict[str, bytes], after: dict[str, bytes], leaves: str) -> list[str]:
    """What changed outside the CA's own leaves/ directory, one phrase a file."""
    out = []
    for name in sorted(before.keys() | after.keys()):
        if name.startswith(leaves + os.sep):
            continue
        if name not in before:
            key = " (a private key)" if b"PRIVATE KEY" in after[name] else ""
            out.append(f"WROTE {name}{key}")
        elif name not in after:
            out.append(f"DELETED {name}")
        elif before[name] != after[name]:
            out.append(f"OVERWROTE {name}")
    return out


async def open_streams(interceptor, host: str, port: int):
    """A stream pair on a tunnel `interceptor.open` made for a CONNECT to host:port, and its release. Since the
    tunnel copies at the protocol level (`proxy.pipe`), `open` takes the connection's protocol; before, it returned
    streams itself (an older --tree)."""
    if "protocol_factory" not in inspect.signature(interceptor.open).parameters:
        return await interceptor.open(host, port)
    reader = asyncio.StreamReader()
    protocol = asyncio.StreamReaderProtocol(reader)
    transport, release = await interceptor.open(host, port, lambda: protocol)
    return reader, asyncio.StreamWriter(transport, protocol, reader, asyncio.get_running_loop()), release


async def _row(root, leaves, log, interceptor, errors, via: str, name: str | bytes) -> str:
    """Send `name` via 'connect' (the CONNECT target and then the SNI) or 'sni' (a ClientHello on a tunnel
    CONNECTed for GOOD); what happened, in a phrase."""
    before, logged = _snapshot(root), len(log.lines)
    try:
        reader, writer, release = await open_streams(interceptor, name if via == "connect" else GOOD, 443)
    except errors.OriginError as exc:
        answer = f"CONNECT refused ({exc.status})"
    else:
        try:
            answer = await answer_to_hello(reader, writer, name if isinstance(name, bytes) else name.encode())
        finally:
            writer.close()
            release()
        answer = {"server_hello": "LEAF MINTED", "closed": "handshake failed (closed)",
                   "alert 112": "handshake refused (unrecognized_name)"}.get(
            answer, answer)
    said = "; ".join(log.lines[logged:])
    touched = _changes(before, _snapshot(root), leaves)
    return "; ".join([answer, *touched] + ([f"log: {said[:110]}"] if said else []))


async def run(tree: pathlib.Path, root: pathlib.Path) -> list[tuple[str, str, str]]:
    local_ca, mitm = load(tree)
    errors = importlib.import_module("proxy.errors")
    log = _Lines()
    logging.getLogger("swarmproxy").addHandler(log)
    # What CPython would print as "Exception ignored in: ..." with a traceback, shown in the row instead.
    sys.unraisablehook = lambda u: log.lines.append(f"TRACEBACK on stderr: {u.exc_type.__name__}: {u.exc_value}")
    outside = root / "outside"
    outside.mkdir()
    (outside / f"victim.{DOMAIN}.pem").write_text(VICTIM)
    data = root / "data" / "ca"
    ca = local_ca.LocalCA(data, local_ca.parse_mitm_hosts(f"*.{DOMAIN}"))
    interceptor = mitm.Interceptor(ca, None)
    await interceptor.start()
    up = "../../../outside"  # from data/ca/leaves/ to root/outside
    rows = [
        ("connect", f"{up}/connect.{DOMAIN}", "path traversal (CONNECT + SNI)"),
        ("sni", f"{up}/sni.{DOMAIN}", "path traversal (SNI)"),
        ("sni", f"{outside}/absolute.{DOMAIN}", "absolute path (SNI)"),
        ("sni", f"{up}/victim.{DOMAIN}", "overwrite a file (SNI)"),
        ("connect", f"*.{DOMAIN}", "wildcard (CONNECT + SNI)"),
        ("sni", f"*.{DOMAIN}", "wildcard (SNI)"),
        ("sni", f"a..{DOMAIN}", "empty label"),
        ("sni", f"x y.{DOMAIN}", "space"),
        ("sni", f"-x.{DOMAIN}", "leading hyphen"),
        ("sni", f"{'a' * 64}.{DOMAIN}", "label of 64"),
        ("sni", f"\u212a.{DOMAIN}".encode(), "non-ASCII (KELVIN SIGN)"),
        ("sni", f"other.{DOMAIN}", "listed, but no CONNECT asked for it"),
        ("sni", "OK.Swarm.Test.", "control: the CONNECT's own name"),
    ]
    table = []
    try:
        for via, name, what in rows:
            outcome = await _row(root, "data/ca/leaves", log, interceptor, errors, via, name)
            table.append((what, str(name), outcome))
        before = _snapshot(root)
        local_ca.MAX_LEAVES = 0  # the next leaf evicts every one before it (and itself)
        ca.context_for(GOOD.replace("ok.", "evict."))
        touched = _changes(before, _snapshot(root), "data/ca/leaves")
        table.append(("leaf cache eviction", "(every leaf)", "; ".join(touched) or "nothing outside touched"))
    finally:
        await interceptor.stop()
    try:
        ip_ca = local_ca.LocalCA(root / "ip" / "ca", local_ca.parse_mitm_hosts("*.0.0.10"))
    except errors.ConfigError as exc:
        table.append(("IP literal", "127.0.0.10 under '*.0.0.10'", f"list refused at start: {exc}"))
    else:
        ip_interceptor = mitm.Interceptor(ip_ca, None)
        await ip_interceptor.start()
        try:
            table.append(("IP literal", "127.0.0.10 under '*.0.0.10'",
                          await _row(root, "ip/ca/leaves", log, ip_interceptor, errors, "connect", "127.0.0.10")))
        finally:
            await ip_interceptor.stop()
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.attacks.ca_names", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=pathlib.Path, default=HERE,
                        help="checkout whose proxy/local_ca.py and proxy/mitm.py to attack (default: %(default)s)")
    tree = parser.parse_args(argv).tree.resolve()
    with tempfile.TemporaryDirectory(prefix="ca_names.") as directory:
        table = asyncio.run(run(tree, pathlib.Path(directory)))
    print(f"tree: {tree}   (paths below are relative to the temporary root; data/ca is the CA's directory)")
    width = max(len(what) for what, _, _ in table)
    for what, name, outcome in table:
        shown = name if len(name) <= 44 else name[:20] + "..." + name[-21:]
        print(f"{what:{width}}  {shown:44}  {outcome}")


if __name__ == "__main__":
    main()
