"""The publish gate: one row per rule, both sides of each, header case and field merging."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict

from proxy.publish_gate import (GateDecision, cache_control, content_length_of, content_range, gate, request_gate,
                                strong_etag, validator_of)

URL = "https://example.org/files/big.iso?v=2"
LM = "Tue, 15 Nov 1994 08:12:31 GMT"
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
    "expires-alone-ok": ("GET", "https://example.org/a?expires=3600", [], 200, GOOD, "ok"),
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
                                        resp(("Cache-Control", "public"), ("Expires", LM)), "ok"),
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
    assert reasons >= {"ok", "scheme", "url", "userinfo", "signed-url", "method", "conditional", "status",
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
