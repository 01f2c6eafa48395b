"""`describe_failure`: an origin failure becomes the answer that says what went wrong and which setting to change."""

from __future__ import annotations

import ssl

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey

from proxy.origin import describe_failure

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
