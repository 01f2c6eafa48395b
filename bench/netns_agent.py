"""A helper process inside one namespace of the test internet (`bench/internet_netns.py`): it does, with plain
sockets, what the test asks of that machine, one JSON request per line on its standard input, one JSON answer per
line on its standard output, until its input closes.

    python -m bench.netns_agent NAME

Requests (`op` and its fields):

- `listen` (`port`: 0 for any): a TCP listener on 0.0.0.0:port (SO_REUSEPORT, so that `connect` may leave from the
  same port); whoever connects is sent one line, `NAME ADDRESS:PORT` (this machine's name and the address it saw
  the connection come from: a public machine's listener is the "what is my address" observer), and closed.
  Answers `port`.
- `connect` (`host`, `port`, `timeout`, `bind_port` optional, `read` true by default): a TCP connection, from
  `bind_port` if given; the line the other end sent (with `read`; without, the connection is closed once made).
  Answers `ok`, `answer`, `local`, or `error` ("refused", "timeout", "unreachable", ...).
- `natpmp` (`gateway`, `port`, `protocol`, `lifetime`): a NAT-PMP mapping (RFC 6886) of the local `port` asked of
  the gateway, and its external address. Answers `ok`, `external_port`, `external_address`, or `error`.
- `get` (`url`): an HTTP GET with no proxy (a node's admin API on this machine's 127.0.0.1). Answers `status`,
  `body` (the JSON it returned), or `error`.

Every socket here is opened in the namespace the agent was started in: it reaches only the test internet.
"""

from __future__ import annotations

import errno
import json
import socket
import struct
import sys
import threading
import urllib.error
import urllib.request

NATPMP_PORT = 5351
NATPMP_OPCODES = {"udp": 1, "tcp": 2}


def _listen(name: str, port: int) -> dict:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    server.bind(("0.0.0.0", port))
    server.listen(64)

    def serve() -> None:
        while True:
            connection, (host, peer_port) = server.accept()
            with connection:
                connection.sendall(f"{name} {host}:{peer_port}\n".encode())

    threading.Thread(target=serve, daemon=True).start()
    return {"port": server.getsockname()[1]}


def _why(exc: OSError) -> str:
    if isinstance(exc, TimeoutError):
        return "timeout"
    return {errno.ECONNREFUSED: "refused", errno.ECONNRESET: "reset", errno.EHOSTUNREACH: "unreachable",
            errno.ENETUNREACH: "unreachable"}.get(exc.errno or 0, str(exc))


def _connect(host: str, port: int, timeout: float, bind_port: int | None = None, read: bool = True) -> dict:
    client = socket.socket()
    try:
        client.settimeout(timeout)
        if bind_port is not None:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            client.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            client.bind(("0.0.0.0", bind_port))
        client.connect((host, port))
        local = "{}:{}".format(*client.getsockname())
        answer = client.makefile("rb").readline().decode().strip() if read else ""
        return {"ok": True, "answer": answer, "local": local}
    except OSError as exc:
        return {"ok": False, "error": _why(exc)}
    finally:
        client.close()


def _natpmp(gateway: str, port: int, protocol: str, lifetime: int, timeout: float = 2.0) -> dict:
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.settimeout(timeout)
    try:
        udp.sendto(struct.pack("!BBHHHI", 0, NATPMP_OPCODES[protocol], 0, port, port, lifetime),
                   (gateway, NATPMP_PORT))
        _, opcode, result, _, internal, external, granted = struct.unpack("!BBHIHHI", udp.recv(16))
        if result != 0 or internal != port:
            return {"ok": False, "error": f"NAT-PMP result {result} (opcode {opcode}, internal {internal})"}
        udp.sendto(struct.pack("!BB", 0, 0), (gateway, NATPMP_PORT))  # the external address
        reply = udp.recv(16)
        return {"ok": True, "external_port": external, "lifetime": granted,
                "external_address": socket.inet_ntoa(reply[8:12])}
    except OSError as exc:
        return {"ok": False, "error": _why(exc)}
    finally:
        udp.close()


def _get(url: str, timeout: float = 10.0) -> dict:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as response:
            return {"status": response.status, "body": json.load(response)}
    except urllib.error.HTTPError as exc:
        return {"status": exc.code, "error": exc.read().decode(errors="replace")[:500]}
    except OSError as exc:
        return {"error": _why(exc)}


def main(argv: list[str]) -> int:
    name = argv[0] if argv else socket.gethostname()
    for line in sys.stdin:
        request = json.loads(line)
        op = request.pop("op")
        try:
            if op == "listen":
                answer = _listen(name, **request)
            elif op == "connect":
                answer = _connect(**request)
            elif op == "natpmp":
                answer = _natpmp(**request)
            elif op == "get":
                answer = _get(**request)
            else:
                answer = {"error": f"no such op {op!r}"}
        except Exception as exc:  # the test reads why, and the agent serves on
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
