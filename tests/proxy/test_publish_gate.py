"""The publish gate: one row per rule, both sides of each, header case and field merging; the URL rule
against a corpus of real signed-URL formats (signed_url_corpus.py); redact_url."""

from __future__ import annotations

from urllib.parse import quote, urlsplit, urlunsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict

from proxy.publish_gate import (
    GateDecision,
    cache_control,
    content_length_of,
    content_range,
    gate,
    gate_and_length,
    redact_url,
    request_gate,
    strong_etag,
    validator_of,
)
from proxy.url_privacy import REDACTED, SECRET_WORDS, url_reason

from .signed_url_corpus import ALLOWED, CORPUS, ISSUE_19, JWT_HS256, KNOWN_MISSES, SHA256_HEX

URL = "https://example.org/files/big.iso?v=2"
LM = "Tue, 15 Nov 1994 08:12:31 GMT"
LATER = "Tue, 15 Nov 1994 09:12:31 GMT"
GOOD = [("ETag", '"v1"'), ("Content-Length", "1000")]


def resp(*extra, base=GOOD):
    return list(base) + list(extra)


# (method, url, request headers, status, response headers, expected reason)
ROWS = {
    "plain-get-ok": ("GET", URL, [], 200, GOOD, "ok"),
    # URL
    "http-ok": ("GET", "http://example.org/a", [], 200, GOOD, "ok"),
    "ftp-scheme": ("GET", "ftp://example.org/a", [], 200, GOOD, "scheme"),
    "no-scheme": ("GET", "example.org/a", [], 200, GOOD, "scheme"),
    "no-host": ("GET", "http:///a", [], 200, GOOD, "url"),
    "bad-port": ("GET", "http://example.org:99999/a", [], 200, GOOD, "url"),
    "bad-ipv6": ("GET", "http://[::1/a", [], 200, GOOD, "url"),
    "userinfo": ("GET", "https://alice:secret@example.org/a", [], 200, GOOD, "userinfo"),
    "user-only": ("GET", "https://alice@example.org/a", [], 200, GOOD, "userinfo"),
    "at-in-path-ok": ("GET", "https://example.org/@scope/pkg", [], 200, GOOD, "ok"),
    "s3-sigv4": ("GET", URL + "&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=a&X-Amz-Signature=f", [], 200,
                 GOOD, "signed-url"),
    "s3-credential-only": ("GET", "https://b.s3.amazonaws.com/k?x-amz-credential=a", [], 200, GOOD, "signed-url"),
    "s3-security-token": ("GET", "https://b.s3.amazonaws.com/k?X-Amz-Security-Token=t", [], 200, GOOD,
                          "signed-url"),
    "cloudfront": ("GET", "https://d.cloudfront.net/a?Expires=1&Signature=abc&Key-Pair-Id=K", [], 200, GOOD,
                   "signed-url"),
    "gcs-legacy": ("GET", "https://storage.googleapis.com/b/o?GoogleAccessId=x&Expires=1&Signature=s", [], 200,
                   GOOD, "signed-url"),
    "gcs-v4": ("GET", "https://storage.googleapis.com/b/o?X-Goog-Signature=s", [], 200, GOOD, "signed-url"),
    "azure-sas": ("GET", "https://a.blob.core.windows.net/c/b?sv=2020-08-04&se=2030&sig=abc", [], 200, GOOD,
                  "signed-url"),
    "expires-alone": ("GET", "https://example.org/a?expires=3600", [], 200, GOOD, "signed-url"),
    "hex-value": ("GET", f"https://example.org/a?x={SHA256_HEX}", [], 200, GOOD, "secret-value"),
    "access-token": ("GET", "https://example.org/a?access_token=x", [], 200, GOOD, "signed-url"),
    "token-case": ("GET", "https://example.org/a?TOKEN=x", [], 200, GOOD, "signed-url"),
    "refresh-token-suffix": ("GET", "https://example.org/a?refresh_token=x", [], 200, GOOD, "signed-url"),
    "api-key": ("GET", "https://example.org/a?api_key=x", [], 200, GOOD, "signed-url"),
    "apikey": ("GET", "https://example.org/a?ApiKey=x", [], 200, GOOD, "signed-url"),
    "key": ("GET", "https://example.org/a?key=x", [], 200, GOOD, "signed-url"),
    "auth": ("GET", "https://example.org/a?auth=x", [], 200, GOOD, "signed-url"),
    "encoded-name": ("GET", "https://example.org/a?%73ig=x", [], 200, GOOD, "signed-url"),
    "semicolon-separated": ("GET", "https://example.org/a?v=1;sig=x", [], 200, GOOD, "signed-url"),
    "path-session": ("GET", "https://example.org/a;jsessionid=123/f.iso", [], 200, GOOD, "signed-url"),
    "keyboard-not-key-ok": ("GET", "https://example.org/a?keyboard=us&monkey=1", [], 200, GOOD, "ok"),
    "token-in-value-ok": ("GET", "https://example.org/a?name=token", [], 200, GOOD, "ok"),
    # method
    "head": ("HEAD", URL, [], 200, GOOD, "method"),
    "post": ("POST", URL, [], 200, GOOD, "method"),
    "lowercase-get": ("get", URL, [], 200, GOOD, "method"),
    # conditional requests
    "if-none-match": ("GET", URL, [("If-None-Match", '"v0"')], 200, GOOD, "conditional"),
    "if-modified-since": ("GET", URL, [("if-modified-since", LM)], 200, GOOD, "conditional"),
    "if-match": ("GET", URL, [("If-Match", '"v1"')], 200, GOOD, "conditional"),
    "if-unmodified-since": ("GET", URL, [("If-Unmodified-Since", LM)], 200, GOOD, "conditional"),
    "if-range-ok": ("GET", URL, [("Range", "bytes=0-9"), ("If-Range", '"v1"')], 200, GOOD, "ok"),
    # status
    "206-ok": ("GET", URL, [("Range", "bytes=0-9")], 206,
               [("ETag", '"v1"'), ("Content-Range", "bytes 0-9/1000"), ("Content-Length", "10")], "ok"),
    "206-no-length-field-ok": ("GET", URL, [], 206, [("ETag", '"v1"'), ("Content-Range", "bytes 10-19/1000")],
                               "ok"),
    "206-unit-case": ("GET", URL, [], 206, [("ETag", '"v1"'), ("Content-Range", "Bytes 0-9/1000")], "ok"),
    "206-unknown-length": ("GET", URL, [], 206, [("ETag", '"v1"'), ("Content-Range", "bytes 0-9/*")],
                           "content-range"),
    "206-no-content-range": ("GET", URL, [], 206, [("ETag", '"v1"'), ("Content-Type", "multipart/byteranges; "
                                                                                       "boundary=x")],
                             "content-range"),
    "206-last-beyond-end": ("GET", URL, [], 206, [("ETag", '"v1"'), ("Content-Range", "bytes 0-1000/1000")],
                            "content-range"),
    "206-reversed": ("GET", URL, [], 206, [("ETag", '"v1"'), ("Content-Range", "bytes 9-0/1000")], "content-range"),
    "206-length-disagrees": ("GET", URL, [], 206, [("ETag", '"v1"'), ("Content-Range", "bytes 0-9/1000"),
                                                   ("Content-Length", "11")], "content-range"),
    "304": ("GET", URL, [], 304, GOOD, "status"),
    "404": ("GET", URL, [], 404, GOOD, "status"),
    "203": ("GET", URL, [], 203, GOOD, "status"),
    "100": ("GET", URL, [], 100, GOOD, "status"),
    "no-response": ("GET", URL, [], None, None, "no-response"),
    "no-response-with-cookie": ("GET", URL, [("Cookie", "a=b")], None, None, "cookie"),
    # validator
    "last-modified-ok": ("GET", URL, [], 200, [("Last-Modified", LM), ("Content-Length", "5")], "ok"),
    "weak-etag-only": ("GET", URL, [], 200, [("ETag", 'W/"v1"'), ("Content-Length", "5")], "no-validator"),
    "weak-etag-and-lm-ok": ("GET", URL, [], 200, [("ETag", 'W/"v1"'), ("Last-Modified", LM), ("Content-Length", "5")],
                            "ok"),
    "unquoted-etag": ("GET", URL, [], 200, [("ETag", "v1"), ("Content-Length", "5")], "no-validator"),
    "two-etags": ("GET", URL, [], 200, [("ETag", '"a"'), ("ETag", '"b"'), ("Content-Length", "5")], "no-validator"),
    "bad-last-modified": ("GET", URL, [], 200, [("Last-Modified", "yesterday"), ("Content-Length", "5")],
                          "no-validator"),
    "no-validator": ("GET", URL, [], 200, [("Content-Length", "5")], "no-validator"),
    # length
    "no-length": ("GET", URL, [], 200, [("ETag", '"v1"')], "no-length"),
    "chunked": ("GET", URL, [], 200, [("ETag", '"v1"'), ("Transfer-Encoding", "chunked")], "no-length"),
    "chunked-and-length": ("GET", URL, [], 200, [("ETag", '"v1"'), ("Transfer-Encoding", "chunked"),
                                                 ("Content-Length", "5")], "no-length"),
    "bad-length": ("GET", URL, [], 200, [("ETag", '"v1"'), ("Content-Length", "5.0")], "no-length"),
    "negative-length": ("GET", URL, [], 200, [("ETag", '"v1"'), ("Content-Length", "-5")], "no-length"),
    "repeated-same-length-ok": ("GET", URL, [], 200, [("ETag", '"v1"'), ("Content-Length", "5"),
                                                      ("Content-Length", "5")], "ok"),
    "list-same-length-ok": ("GET", URL, [], 200, [("ETag", '"v1"'), ("Content-Length", "5, 5")], "ok"),
    "conflicting-lengths": ("GET", URL, [], 200, [("ETag", '"v1"'), ("Content-Length", "5"),
                                                  ("Content-Length", "6")], "no-length"),
    # cache-control
    "resp-no-store": ("GET", URL, [], 200, resp(("Cache-Control", "no-store")), "no-store"),
    "resp-NO-STORE-case": ("GET", URL, [], 200, resp(("cache-control", "max-age=5, NO-STORE")), "no-store"),
    "req-no-store": ("GET", URL, [("Cache-Control", "no-store")], 200, GOOD, "no-store"),
    "resp-private": ("GET", URL, [], 200, resp(("Cache-Control", "private")), "private"),
    "resp-private-qualified": ("GET", URL, [], 200, resp(("Cache-Control", 'private="set-cookie", max-age=9')),
                               "private"),
    "req-private": ("GET", URL, [("Cache-Control", "private")], 200, GOOD, "private"),
    "private-inside-quotes-ok": ("GET", URL, [], 200, resp(("Cache-Control", 'no-cache="private, no-store"')),
                                 "ok"),
    "x-private-token-ok": ("GET", URL, [], 200, resp(("Cache-Control", "x-private, x-no-store=1")), "ok"),
    "no-cache-ok": ("GET", URL, [("Cache-Control", "no-cache")], 200, resp(("Cache-Control", "no-cache")), "ok"),
    # credentials
    "authorization": ("GET", URL, [("Authorization", "Bearer x")], 200, GOOD, "authorization"),
    "authorization-public-fresh-ok": ("GET", URL, [("Authorization", "Bearer x")], 200,
                                      resp(("Cache-Control", "public, max-age=60")), "ok"),
    "authorization-public-s-maxage-ok": ("GET", URL, [("Authorization", "Bearer x")], 200,
                                         resp(("Cache-Control", "public, s-maxage=60")), "ok"),
    "authorization-public-expires-ok": ("GET", URL, [("Authorization", "Bearer x")], 200,
                                        resp(("Cache-Control", "public"), ("Date", LM), ("Expires", LATER)), "ok"),
    # README and code disagreed here: "public and fresh" was code for "public and any max-age/Expires at all".
    # Fresh now means a positive lifetime the response states itself (RFC 9111 §4.2.1 precedence).
    "authorization-public-expires-past": ("GET", URL, [("Authorization", "Bearer x")], 200,
                                          resp(("Cache-Control", "public"), ("Date", LATER), ("Expires", LM)),
                                          "freshness"),
    "authorization-public-expires-no-date": ("GET", URL, [("Authorization", "Bearer x")], 200,
                                             resp(("Cache-Control", "public"), ("Expires", LATER)), "freshness"),
    "authorization-public-max-age-0": ("GET", URL, [("Authorization", "Bearer x")], 200,
                                       resp(("Cache-Control", "public, max-age=0")), "freshness"),
    "authorization-public-s-maxage-0-wins": ("GET", URL, [("Authorization", "Bearer x")], 200,
                                             resp(("Cache-Control", "public, s-maxage=0, max-age=60")), "freshness"),
    "authorization-public-max-age-beats-expires": ("GET", URL, [("Authorization", "Bearer x")], 200,
                                                   resp(("Cache-Control", "public, max-age=0"), ("Date", LM),
                                                        ("Expires", LATER)), "freshness"),
    "authorization-public-no-cache": ("GET", URL, [("Authorization", "Bearer x")], 200,
                                      resp(("Cache-Control", "public, no-cache, max-age=60")), "freshness"),
    "authorization-public-must-revalidate-ok": ("GET", URL, [("Authorization", "Bearer x")], 200,
                                                resp(("Cache-Control", "public, must-revalidate, max-age=60")), "ok"),
    # RFC 9111 §3.5 would store these; we want the origin to say `public` before strangers get it
    "authorization-s-maxage-not-public": ("GET", URL, [("Authorization", "Bearer x")], 200,
                                          resp(("Cache-Control", "s-maxage=60")), "authorization"),
    "authorization-must-revalidate-not-public": ("GET", URL, [("Authorization", "Bearer x")], 200,
                                                 resp(("Cache-Control", "must-revalidate, max-age=60")),
                                                 "authorization"),
    "cookie-public-max-age-0": ("GET", URL, [("Cookie", "sid=1")], 200, resp(("Cache-Control", "public, max-age=0")),
                                "freshness"),
    "authorization-public-no-freshness": ("GET", URL, [("Authorization", "Bearer x")], 200,
                                          resp(("Cache-Control", "public")), "freshness"),
    "authorization-public-bad-max-age": ("GET", URL, [("Authorization", "Bearer x")], 200,
                                         resp(("Cache-Control", "public, max-age=soon")), "freshness"),
    "authorization-public-bad-expires": ("GET", URL, [("Authorization", "Bearer x")], 200,
                                         resp(("Cache-Control", "public"), ("Expires", "0")), "freshness"),
    "authorization-public-but-private": ("GET", URL, [("Authorization", "Bearer x")], 200,
                                         resp(("Cache-Control", "public, private, max-age=5")), "private"),
    "cookie": ("GET", URL, [("Cookie", "sid=1")], 200, GOOD, "cookie"),
    "cookie-public-ok": ("GET", URL, [("Cookie", "sid=1")], 200, resp(("Cache-Control", "public, max-age=1")),
                         "ok"),
    "empty-cookie-ok": ("GET", URL, [("Cookie", "")], 200, GOOD, "ok"),
    "public-in-request-does-not-excuse": ("GET", URL, [("Cookie", "a=1"), ("Cache-Control", "public, max-age=1")],
                                          200, GOOD, "cookie"),
    "proxy-authorization-ok": ("GET", URL, [("Proxy-Authorization", "Basic x")], 200, GOOD, "ok"),
    # set-cookie
    "set-cookie": ("GET", URL, [], 200, resp(("Set-Cookie", "sid=1; Path=/")), "set-cookie"),
    "set-cookie-public": ("GET", URL, [], 200, resp(("Cache-Control", "public, max-age=5"), ("set-cookie", "a=1")),
                          "set-cookie"),
    # vary
    "vary-accept-encoding-ok": ("GET", URL, [], 200, resp(("Vary", "Accept-Encoding")), "ok"),
    "vary-accept-encoding-case-ok": ("GET", URL, [], 200, resp(("vary", " accept-encoding , ")), "ok"),
    "vary-star": ("GET", URL, [], 200, resp(("Vary", "*")), "vary"),
    "vary-cookie": ("GET", URL, [], 200, resp(("Vary", "Accept-Encoding, Cookie")), "vary"),
    "vary-user-agent": ("GET", URL, [], 200, resp(("Vary", "User-Agent")), "vary"),
    "vary-second-field": ("GET", URL, [], 200, resp(("Vary", "Accept-Encoding"), ("VARY", "Origin")), "vary"),
    # content-encoding
    "gzip-with-etag-ok": ("GET", URL, [], 200, resp(("Content-Encoding", "gzip")), "ok"),
    "gzip-with-lm-only": ("GET", URL, [], 200, [("Last-Modified", LM), ("Content-Length", "5"),
                                               ("Content-Encoding", "gzip")], "encoding"),
    "identity-with-lm-ok": ("GET", URL, [], 200, [("Last-Modified", LM), ("Content-Length", "5"),
                                                 ("Content-Encoding", "identity")], "ok"),
    # header-name case and merging
    "upper-case-names": ("GET", URL, [("AUTHORIZATION", "x")], 200, [("ETAG", '"v1"'), ("CONTENT-LENGTH", "5")],
                         "authorization"),
    "cache-control-merged-across-fields": ("GET", URL, [("Authorization", "x")], 200,
                                           resp(("Cache-Control", "public"), ("cache-control", "max-age=60")), "ok"),
    "no-store-in-second-field": ("GET", URL, [], 200, resp(("Cache-Control", "max-age=60"),
                                                          ("Cache-Control", "no-store")), "no-store"),
}


@pytest.mark.parametrize("method,url,request_headers,status,response_headers,reason", ROWS.values(), ids=ROWS.keys())
def test_gate(method, url, request_headers, status, response_headers, reason):
    assert gate(method, url, request_headers, status, response_headers) == GateDecision(reason == "ok", reason)


def test_every_rule_has_both_sides():
    reasons = {row[-1] for row in ROWS.values()}
    assert reasons >= {"ok", "scheme", "url", "userinfo", "signed-url", "secret-value", "method", "conditional",
                       "status",
                       "content-range", "no-response", "no-validator", "no-length", "no-store", "private",
                       "authorization", "cookie", "freshness", "set-cookie", "vary", "encoding"}


@pytest.mark.parametrize("make", [
    pytest.param(lambda pairs: pairs, id="list"),
    pytest.param(lambda pairs: iter(pairs), id="iterator"),
    pytest.param(lambda pairs: CIMultiDict(pairs), id="CIMultiDict"),
    pytest.param(lambda pairs: CIMultiDict(pairs).items(), id="items-view"),
    pytest.param(lambda pairs: dict(pairs), id="dict"),
])
def test_header_containers(make):
    request = [("Authorization", "x")]
    response = [("ETag", '"v1"'), ("Content-Length", "5"), ("Cache-Control", "public, max-age=5")]
    assert gate("GET", URL, make(request), 200, make(response)).swarmable
    assert gate("GET", URL, make(request), 200, make(response[:2])).reason == "authorization"


def test_multidict_keeps_repeated_fields():
    response = CIMultiDict([("ETag", '"v1"'), ("Content-Length", "5"), ("Vary", "Accept-Encoding"), ("Vary", "Cookie")])
    assert gate("GET", URL, CIMultiDict(), 200, response).reason == "vary"


# request_gate: what is known before the origin answers


@pytest.mark.parametrize("method,url,headers,reason", [
    ("GET", URL, [], "ok"),
    ("GET", URL, [("Range", "bytes=100-"), ("If-Range", '"v1"')], "ok"),
    ("HEAD", URL, [], "method"),
    ("GET", "ftp://example.org/a", [], "scheme"),
    ("GET", "https://u:p@example.org/a", [], "userinfo"),
    ("GET", "https://example.org/a?X-Amz-Signature=1", [], "signed-url"),
    ("GET", URL, [("If-None-Match", "*")], "conditional"),
    ("GET", URL, [("Cache-Control", "no-store")], "no-store"),
    ("GET", URL, [("Cache-Control", "private")], "private"),
    # a response could still say `public`, but nothing has arrived: refuse
    ("GET", URL, [("Authorization", "Basic x")], "authorization"),
    ("GET", URL, [("cookie", "a=1")], "cookie"),
], ids=lambda v: v if isinstance(v, str) and not v.startswith("http") else None)
def test_request_gate(method, url, headers, reason):
    assert request_gate(method, url, headers) == GateDecision(reason == "ok", reason)


@pytest.mark.parametrize("row", [r for r in ROWS if ROWS[r][3] is not None], ids=str)
def test_request_gate_never_allows_what_gate_refuses_for_request_reasons(row):
    method, url, request_headers, status, response_headers, reason = ROWS[row]
    early = request_gate(method, url, request_headers)
    if early.swarmable:
        return
    # Whatever request_gate refuses, gate refuses too unless a response excuses credentials.
    full = gate(method, url, request_headers, status, response_headers)
    assert not full.swarmable or early.reason in ("authorization", "cookie")


# helpers


@pytest.mark.parametrize("headers,expected", [
    ([("ETag", '"abc"'), ("Last-Modified", LM)], '"abc"'),
    ([("etag", '""')], '""'),
    ([("ETag", 'W/"abc"'), ("Last-Modified", LM)], "LM " + LM),
    ([("ETag", 'w/"abc"')], None),
    ([("Last-Modified", LM)], "LM " + LM),
    ([("Last-Modified", "not a date")], None),
    ([("ETag", '"a" junk')], None),
    ([], None),
    (None, None),
], ids=["etag-wins", "empty-etag", "weak-falls-back-to-lm", "lower-w-is-weak", "lm", "bad-lm", "junk-etag",
        "nothing", "none"])
def test_validator_of(headers, expected):
    assert validator_of(headers) == expected


def test_strong_etag_keeps_quotes():
    assert strong_etag(CIMultiDict(ETag='"x-1"')) == '"x-1"'


@pytest.mark.parametrize("status,headers,expected", [
    (200, [("Content-Length", "1000")], 1000),
    (200, [("content-length", " 0 ")], 0),
    (200, [("Content-Length", "1000"), ("Transfer-Encoding", "chunked")], None),
    (200, [], None),
    (200, [("Content-Length", "1" * 30)], None),
    (206, [("Content-Range", "bytes 0-9/1000")], 1000),
    (206, [("Content-Range", "bytes 990-999/1000"), ("Content-Length", "10")], 1000),
    (206, [("Content-Range", "bytes 0-9/*")], None),
    (206, [("Content-Length", "10")], None),
    (404, [("Content-Length", "10")], None),
    (None, [("Content-Length", "10")], None),
], ids=["200", "zero", "chunked", "missing", "absurd", "206", "206-tail", "206-star", "206-no-range", "404", "none"])
def test_content_length_of(status, headers, expected):
    assert content_length_of(status, headers) == expected


@pytest.mark.parametrize("method,url,request_headers,status,response_headers,reason", ROWS.values(), ids=ROWS.keys())
def test_gate_and_length_is_the_gate_and_the_length_at_once(method, url, request_headers, status, response_headers,
                                                             reason):
    decision, length = gate_and_length(method, url, request_headers, status, response_headers)
    assert decision == gate(method, url, request_headers, status, response_headers)
    assert length == content_length_of(status, response_headers)


@pytest.mark.parametrize("value,expected", [
    ("bytes 0-0/1", (0, 0, 1)),
    ("bytes 5-9/10", (5, 9, 10)),
    ("bytes  5-9/10", (5, 9, 10)),
    ("bytes 5-10/10", None),
    ("bytes */10", None),
    ("bytes 5-9/*", None),
    ("items 5-9/10", None),
    (None, None),
], ids=str)
def test_content_range(value, expected):
    assert content_range(value) == expected


@pytest.mark.parametrize("value,expected", [
    ("no-store", {"no-store": None}),
    ("Public, MAX-AGE=60", {"public": None, "max-age": "60"}),
    ('private="set-cookie, x-foo", no-cache', {"private": "set-cookie, x-foo", "no-cache": None}),
    ('ext="a\\"b", s-maxage = 5', {"ext": 'a"b', "s-maxage": "5"}),
    ("max-age=1, max-age=2", {"max-age": "1"}),
    (",, ,public,", {"public": None}),
    ("", {}),
    (None, {}),
], ids=["single", "case", "quoted-comma", "escaped-quote", "first-wins", "empty-members", "empty", "none"])
def test_cache_control(value, expected):
    assert cache_control(value) == expected


text = st.text(st.characters(codec="latin-1"), max_size=40)
names = st.one_of(text, st.sampled_from([
    "ETag", "Last-Modified", "Content-Length", "Content-Range", "Cache-Control", "Vary", "Set-Cookie", "Cookie",
    "Authorization", "Expires", "Transfer-Encoding", "Content-Encoding", "If-None-Match", "If-Range"]))


@settings(max_examples=500, deadline=None)
@given(method=st.sampled_from(["GET", "HEAD", "get", ""]), url=st.one_of(text, text.map(lambda s: "https://" + s)),
       request_headers=st.lists(st.tuples(names, text), max_size=6),
       status=st.one_of(st.none(), st.sampled_from([200, 206, 304]), st.integers(-5, 1000)),
       response_headers=st.one_of(st.none(), st.lists(st.tuples(names, text), max_size=8)))
def test_gate_never_raises(method, url, request_headers, status, response_headers):
    decision = gate(method, url, request_headers, status, response_headers)
    assert isinstance(decision.reason, str) and decision.reason
    assert decision.swarmable == (decision.reason == "ok")
    early = request_gate(method, url, request_headers)
    assert early.swarmable == (early.reason == "ok")
    validator_of(response_headers)
    content_length_of(status, response_headers)


# the URL rule against real signed-URL formats (issue 19 item 4)


@pytest.mark.parametrize("url,reason", [row[1:] for row in CORPUS], ids=[row[0] for row in CORPUS])
def test_corpus(url, reason):
    assert gate("GET", url, [], 200, GOOD) == GateDecision(reason == "ok", reason)
    assert request_gate("GET", url, []) == GateDecision(reason == "ok", reason)


@pytest.mark.parametrize("url", [row[1] for row in ISSUE_19], ids=[row[0] for row in ISSUE_19])
def test_issue_19_examples_are_not_announced(url):
    # md5=&expires=, auth_key=, code=&state=, jwt=, hmac=, session=: all were announced before the fix.
    assert not request_gate("GET", url, []).swarmable


@pytest.mark.parametrize("url", [row[1] for row in KNOWN_MISSES], ids=[row[0] for row in KNOWN_MISSES])
def test_known_misses_document_a_limit(url):
    # Tokens in the path proper look like content-addressed paths; if one starts being refused, move it to
    # REFUSED in the corpus.
    assert url_reason(url) is None


@pytest.mark.parametrize("url", [row[1] for row in ALLOWED], ids=[row[0] for row in ALLOWED])
def test_redact_leaves_announceable_urls_alone(url):
    assert redact_url(url) == urlunsplit(urlsplit(url))  # urlsplit lower-cases the scheme, nothing else


@pytest.mark.parametrize("url", [row[1] for row in CORPUS if row[2] in ("signed-url", "secret-value", "userinfo")],
                         ids=[row[0] for row in CORPUS if row[2] in ("signed-url", "secret-value", "userinfo")])
def test_redact_marks_every_refused_corpus_url(url):
    assert REDACTED in redact_url(url)


@pytest.mark.parametrize("url,expected", [
    # nginx secure_link: names and the harmless lang kept
    ("https://dl.example.com/f.iso?md5=AUEnXC7T-Tfv9WLsWbf-mw&expires=2147483647&lang=en",
     "https://dl.example.com/f.iso?md5=REDACTED&expires=REDACTED&lang=en"),
    # Azure SAS: sp/sr/spr are harmless words, the rest goes
    ("https://a.blob.core.windows.net/c/b?sv=2019-02-02&se=2019-04-30T02%3A23%3A26Z&sr=b&sp=r&sig=Z%2FRH%3D",
     "https://a.blob.core.windows.net/c/b?sv=REDACTED&se=REDACTED&sr=b&sp=r&sig=REDACTED"),
    # a JWT under an innocent name
    (f"https://h.example/f.zip?data={JWT_HS256}&v=2", "https://h.example/f.zip?data=REDACTED&v=2"),
    # basic auth: the password always, the user name when it is a plain word
    ("https://alice:s3cret@example.org/a.iso", "https://alice:REDACTED@example.org/a.iso"),
    ("https://alice:@example.org/a.iso", "https://alice:REDACTED@example.org/a.iso"),
    # a git token as user name
    ("https://ghp_16C7e42F292c6912E7710c838347Ae178B4a@github.com/o/r.zip", "https://REDACTED@github.com/o/r.zip"),
    # Java session as a path parameter
    ("https://portal.example.com/app;jsessionid=A1B2C3/download.zip",
     "https://portal.example.com/app;jsessionid=REDACTED/download.zip"),
    # BunnyCDN token path segment
    ("https://z.b-cdn.net/bcdn_token=HS1wm&expires=1598024587&token_path=%2Fv%2F/v/x.mp4",
     "https://z.b-cdn.net/bcdn_token=REDACTED&expires=REDACTED&token_path=REDACTED/v/x.mp4"),
    # Cloudflare Stream: the JWT segment goes whole
    (f"https://customer-x.cloudflarestream.com/{JWT_HS256}/manifest/video.m3u8",
     "https://customer-x.cloudflarestream.com/REDACTED/manifest/video.m3u8"),
    # OAuth implicit grant in the fragment
    ("https://c.example/cb#access_token=2YotnFZFEjr1zCsicMWpAA&state=xyz",
     "https://c.example/cb#access_token=REDACTED&state=REDACTED"),
    # `;` separates parameters too
    ("https://h.example/a?v=1;sig=abc&v=2", "https://h.example/a?v=1;sig=REDACTED&v=2"),
    # a bare flag named like a secret has no value to hide; a bare token is the secret
    ("https://h.example/a?token", "https://h.example/a?token"),
    (f"https://h.example/a?{SHA256_HEX}", "https://h.example/a?REDACTED"),
    # undecodable and double-encoded names: the name may be the secret
    ("https://h.example/a?%ff=1&%2573ig=abc", "https://h.example/a?REDACTED=REDACTED&REDACTED=REDACTED"),
    # a non-ASCII value is not of a harmless shape
    ("https://h.example/a?name=%E2%9C%93", "https://h.example/a?name=REDACTED"),
    # does not parse: scheme, host and path only, path parameters still redacted, userinfo dropped
    ("http://[::1/a?sig=abc", "http://[::1/a"),
    ("http://user:pw@[::1/a;jsessionid=x?sig=abc", "http://[::1/a;jsessionid=REDACTED"),
    ("http://example.org:99999/a?sig=abc#frag", "http://example.org:99999/a"),
    ("http://u:pa/ss@[::1/f.iso", "http://REDACTED/ss@[::1/f.iso"),  # "host" u:pa was meant as userinfo
    # control characters cannot break a log line
    ("https://h.example/a\x00b?v=1", "https://h.example/a%00b?v=1"),
    ("https://h.example/a b?v=1", "https://h.example/a%20b?v=1"),
    # not a URL at all
    ("sig=abc", "sig=REDACTED"),
    ("see my password, pwd=hunter2", "REDACTED=REDACTED"),
    ("", ""),
    # allowed values stay
    ("https://example.com/get?platform=linux&arch=x64", "https://example.com/get?platform=linux&arch=x64"),
], ids=str)
def test_redact_url(url, expected):
    assert redact_url(url) == expected


def test_redact_url_survives_a_non_string():
    assert redact_url(None) == REDACTED  # type: ignore[arg-type]


# properties: nothing raises, nothing refused leaks

secret_names = st.sampled_from(sorted(SECRET_WORDS) + ["X-Amz-Signature", "se", "hdnts", "PHPSESSID", "apiKey"])
plain_names = st.from_regex(r"[a-z]{1,8}", fullmatch=True).filter(lambda n: url_reason(f"https://h/?{n}=1") is None)
plain_values = st.sampled_from(["1", "en", "linux", "x64", "1.2.3", "true", ""])
# A secret carries a marker no plain name or value contains, so "not in the output" means what it says.
secrets = st.one_of(
    st.from_regex(r"[0-9a-f]{8,64}", fullmatch=True),
    st.from_regex(r"[A-Za-z0-9_~.+/-]{4,60}", fullmatch=True),
    st.builds(lambda a, b: f"eyJ{a}.{b}.sig", st.from_regex(r"[A-Za-z0-9_-]{4,20}", fullmatch=True),
              st.from_regex(r"[A-Za-z0-9_-]{4,20}", fullmatch=True)),
).map(lambda value: "QZ9" + value)


@settings(max_examples=500, deadline=None)
@given(before=st.lists(st.tuples(plain_names, plain_values), max_size=3), name=secret_names, secret=secrets,
       after=st.lists(st.tuples(plain_names, plain_values), max_size=3),
       place=st.sampled_from(["query", "fragment", "path-parameter", "password", "any-name"]))
def test_redact_url_never_shows_a_refused_value(before, name, secret, after, place):
    plain = "&".join(f"{n}={v}" for n, v in before + after)
    encoded = quote(secret, safe="")
    url = {
        "query": f"https://h.example/f.iso?{plain}&{name}={encoded}&{plain}",
        "fragment": f"https://h.example/f.iso?{plain}#{name}={encoded}",
        "path-parameter": f"https://h.example/d;{name}={encoded}/f.iso?{plain}",
        "password": f"https://alice:{encoded}@h.example/f.iso?{plain}",
        # under a name that says nothing, a value starting QZ9 changes case and digits too often to pass
        "any-name": f"https://h.example/f.iso?{plain}&x={encoded}0aB1cD2eF3",
    }[place]
    assert url_reason(url) is not None
    redacted = redact_url(url)
    assert "QZ9" not in redacted and REDACTED in redacted


@settings(max_examples=500, deadline=None)
@given(pairs=st.lists(st.tuples(st.text(st.characters(codec="ascii", exclude_characters="&;#="), max_size=12),
                                st.one_of(st.none(), st.text(st.characters(codec="ascii", exclude_characters="&;#"),
                                                             max_size=30))), min_size=1, max_size=5))
def test_redact_url_redacts_exactly_what_the_gate_refuses(pairs):
    pieces = [name if value is None else f"{name}={value}" for name, value in pairs]
    url = "https://h.example/f.iso?" + "&".join(pieces)
    if url_reason(url) == "url":
        return  # not printable ASCII: the gate refuses the whole URL, not a piece
    out = urlsplit(redact_url(url)).query.split("&")
    assert len(out) == len(pieces)
    for piece, shown in zip(pieces, out):
        reason = url_reason("https://h.example/f.iso?" + piece)
        if reason is None:
            assert shown == piece
        elif "=" in piece:
            assert shown.endswith("=" + REDACTED)
        else:  # a bare name: nothing to hide if it is vocabulary (`?token`), all of it if it may be the secret
            assert shown == (piece if reason == "signed-url" else REDACTED)


@settings(max_examples=1000, deadline=None)
@given(url=st.one_of(st.text(), st.text().map(lambda s: "https://" + s),
                     st.text(st.characters(codec="ascii")).map(lambda s: "http://h.example/?" + s)))
def test_url_rule_never_raises(url):
    reason = url_reason(url)
    assert reason is None or reason in ("url", "scheme", "userinfo", "signed-url", "secret-value")
    assert isinstance(redact_url(url), str)
    assert request_gate("GET", url, []).swarmable == (reason is None)
