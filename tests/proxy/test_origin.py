"""`describe_failure`: an origin failure becomes the answer that says what went wrong and which setting to change.
`OriginStream`: one origin GET, asked by its first `next()`."""

from __future__ import annotations

import asyncio
import ssl

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey

from proxy.origin import OriginStream, describe_failure, make_session

from .conftest import body_bytes

KEY = ConnectionKey("origin.example", 443, True, True, None, None, None)


def unverified(code: int, reason: str) -> aiohttp.ClientConnectorCertificateError:
    """What aiohttp raises when OpenSSL's verification fails with X509_V_ERR `code`."""
    error = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: {reason}")
    error.verify_code, error.verify_message = code, reason
    return aiohttp.ClientConnectorCertificateError(KEY, error)


GIVE_THE_CA = "give it to the proxy, which verifies origins: swarmproxy run --ca-file CA.pem (or SSL_CERT_FILE)"


# (what aiohttp raised, the settings in force, status, words of the message, does it say to give the CA?)
@pytest.mark.parametrize("exc, timeouts, status, said, ca_hint", [
    pytest.param(aiohttp.SocketTimeoutError("Timeout on reading data from socket"), {"read_timeout": 60.0}, 504,
                 "timeout: origin origin.example:8443 was silent for 60 s (the proxy's --read-timeout)",
                 False, id="read-timeout"),
    pytest.param(aiohttp.ConnectionTimeoutError("Connection timeout"), {"connect_timeout": 2.5}, 504,
                 "timeout: origin origin.example:8443 could not be reached within 2.5 s (the proxy's "
                 "--connect-timeout)", False, id="connect-timeout"),
    pytest.param(TimeoutError(), {"connect_timeout": 10.0}, 504,
                 "could not be reached within 10 s (the proxy's --connect-timeout)", False, id="resolve-and-connect"),
    pytest.param(TimeoutError(), {}, 504,
                 "could not be reached within the time allowed (the proxy's --connect-timeout)", False,
                 id="no-setting"),
    pytest.param(unverified(20, "unable to get local issuer certificate"), {}, 502,
                 "tls: certificate of origin.example:8443 is not valid: ", True, id="unknown-issuer"),
    pytest.param(unverified(19, "self-signed certificate in certificate chain"), {}, 502, "is not valid: ",
                 True, id="self-signed-in-chain"),
    pytest.param(unverified(18, "self-signed certificate"), {}, 502, "is not valid: ", True, id="self-signed"),
    pytest.param(unverified(10, "certificate has expired"), {}, 502, "is not valid: ", False, id="expired"),
    pytest.param(unverified(62, "Hostname mismatch, certificate is not valid for 'origin.example'."), {}, 502,
                 "is not valid: ", False, id="wrong-name"),
])
def test_a_failure_says_what_to_change(exc, timeouts, status, said, ca_hint):
    error = describe_failure(exc, "origin.example", 8443, **timeouts)
    assert error.status == status
    assert said in error.message, error.message
    # Only a CA the proxy lacks is cured by --ca-file; an expired certificate or another name's is not.
    assert (GIVE_THE_CA in error.message) == ca_hint, error.message


async def test_a_stream_asks_its_origin_at_its_first_next_and_reads_to_the_end(origin):
    session = make_session(connect_timeout=2, read_timeout=2, max_connections=4)
    async with session:
        unasked = OriginStream(session, f"{origin.url}/echo", [])
        unasked.close()  # closed before anything was awaited: nothing was sent
        kind, error = await unasked.next()
        assert kind == "head_failed" and isinstance(error, ConnectionError)
        stream = OriginStream(session, f"{origin.url}/bytes/3000", [("X-Asked", "yes")])
        kind, response = await stream.next()
        assert kind == "head" and response.status == 200 and stream.connected_address == "127.0.0.1"
        body = b""
        while (event := await stream.next())[0] == "data":
            body += event[1]
        assert event == ("end", None) and body == body_bytes(3000)
        stream.close()
        echo = OriginStream(session, f"{origin.url}/echo", [])
        assert (await echo.next())[0] == "head"
        echo.close()
    assert [request["path"] for request in origin.requests] == ["/echo"]  # the unasked stream's never went


async def test_ready_gives_what_is_already_read_without_waiting(origin):
    """`ready()`: the body bytes already read, then the end, with no await; None before the head, while the rest
    has not come, and for a body that broke off (whose `next()` then says so)."""
    session = make_session(connect_timeout=2, read_timeout=5, max_connections=4)
    async with session:
        stream = OriginStream(session, f"{origin.url}/pause/2000", [])
        assert stream.ready() is None  # not even asked
        assert (await stream.next())[0] == "head"
        got = b""
        while len(got) < 1000:  # the first half, all the origin sends before it pauses
            kind, data = await stream.next()
            assert kind == "data"
            got += data
        assert stream.ready() is None  # the rest has not come: it would wait
        origin.resume.set()
        assert stream.upstream is not None
        await stream.upstream.content.wait_eof()  # the rest and the end read, nothing taken
        kind, data = stream.ready()
        assert kind == "data" and got + data == body_bytes(2000)
        assert stream.ready() == ("end", None) == stream.ready()
        stream.close()

        cut = OriginStream(session, f"{origin.url}/cut/2000", [])
        assert (await cut.next())[0] == "head"
        assert cut.upstream is not None
        with pytest.raises(aiohttp.ClientPayloadError):
            await cut.upstream.content.wait_eof()
        assert cut.ready() is None  # the failure is `next()`'s to say
        while (event := await cut.next())[0] == "data":
            pass
        assert event[0] == "failed"
        cut.close()


async def test_cancelling_the_first_next_abandons_the_origin_request(origin):
    session = make_session(connect_timeout=2, read_timeout=30, max_connections=4)
    async with session:
        stream = OriginStream(session, f"{origin.url}/silent", [])
        waiting = asyncio.ensure_future(stream.next())
        await origin.silent_started.wait()  # the request is at the origin, its head awaited
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        stream.close()
        async with asyncio.timeout(10):  # the origin sees its client go, long before the 30 s read timeout
            await origin.silent_abandoned.wait()
