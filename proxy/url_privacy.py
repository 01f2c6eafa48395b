"""May this URL be announced to strangers, and what may a log show of it? (pure functions, table-tested)

Announcing a URL puts its hash in the DHT and serves its bytes to whoever asks, so a URL that carries an
access grant (a signature, a bearer token, a session, an expiry that only makes sense next to a signature)
must never pass. Signed-URL formats keep being invented and their parameter names are configurable
(nginx secure_link reads any `$arg_*`, BunnyCDN and Tencent let the customer rename `token`/`sign`), so a
denylist of names alone fails open. The rule therefore FAILS CLOSED on values: a parameter is announceable
only if its value has a shape that cannot hold a secret, and its name is not one a credential, signature or
expiry goes by. In order, the first failing rule names the reason:

  url           not printable ASCII without spaces (a client's URL is percent-encoded; anything else is
                not one we understand), or urlsplit refuses it (bad port, bad IPv6 literal), or no host
  scheme        not http or https
  userinfo      `user@` or `user:pass@` before the host: a credential whatever it looks like
  signed-url    a query, fragment or `;path` parameter whose NAME is credential vocabulary (below), whatever
                its value, even empty: `md5=&expires=` is nginx secure_link with its values cut off, and
                the name alone says the rest of the URL was issued to someone; also an ASP.NET cookieless
                session segment `/(S(...))/`
  secret-value  a parameter whose VALUE (or whose name, where the name carries no value or is no plain
                word) is not of a harmless shape (below); a path segment holding a JWT; a `%` escape that
                is not UTF-8

A harmless shape is printable ASCII from letters, digits and `. _ ~ - / , : +` and space, at most
`MAX_TEXT` long, and none of:
  - a JWT (`eyJ` + three dot-separated base64url parts), under any name;
  - a run of 9+ digits: Unix times in s/ms/µs (expiries, `ts=`, the `1444435200-` of Alibaba's auth_key)
    and serials long enough to be unguessable; 8 digits (`20240115`) is a version or a date, kept;
  - a date (`2024-01-15`, `20130524T000000Z`): an expiry or start time (Azure `se=`, `X-Amz-Date`);
  - a word (the text between separators) longer than `MAX_WORD`, or one that is 8+ hex digits mixing
    letters and digits (MD5/SHA hex, UUID parts, commit ids), or one that changes between lower case,
    upper case and digits more than `MAX_CLASS_CHANGES` times (base64/base62 noise: `AIzaSyD9tSrke`
    changes 8 times, `x86`/`cp311`/`iPhone15`/`ContentType` at most 3);
  - `MAX_SECRET_BITS` or more by `secret_bits`, the one estimate of how many random bits the text could
    hold, whatever its shape: each distinct word counts log2(10) bits a digit, log2(26) a letter and
    where its digits and capitals stand (hex 4 a character), and a run of letters counts only as much as
    a letter-bigram model of English finds it likelier random than a word. Random tokens score about their
    entropy (20 random letters 94, dashed 8-digit groups 80, base32 65-80, `vkx-zym-fxmej-erxd` 70), words
    and versions little (`stable` 0, `firefox-latest-ssl` 13, `linux-deb-x64` 37, `1.2.3` 10).
So `=`, `%`, `@`, `?`, `&` inside a decoded value (base64 padding, a nested signed URL, Akamai's
`exp=..~hmac=..`) refuse it, and what can pass is a few words, small numbers and versions:
`version=1.2.3`, `platform=linux&arch=x64`, `lang=en-US`, `raw=true`. Measured (bench/attacks/
privacy_gate.py): of random tokens of 64 bits or more, at most 0.5 % of any of 20 shapes pass; of 431
public download URLs, 97.4 % stay shareable (88 % of those with a query string: a value that is a whole
file path, `path=/kafka/3.6.0/kafka_2.13-3.6.0.tgz`, or a run of abbreviations, `win64-aarch64`, scores
like a token). The residual risk: a value of under 40 bits under a name we do not know (`?p=hunter2`, a
6-character id), a few random letters that read as words by chance (1 token in 200 of the weakest
shape), or words chosen at random from a dictionary (a diceware passphrase reads as English).

Credential vocabulary (`_credential_name`): the name, split into words at separators and camelCase
(`X-Amz-Security-Token` -> x amz security token, `AWSAccessKeyId` -> awsaccess key id), contains a word
of `SECRET_WORDS`; or the name without separators contains a stem of `SECRET_STEMS` (`PHPSESSID`,
`jsessionid`, `apikey`, `wowzatokenhash`); or it starts with a provider signing prefix
(`SECRET_PREFIXES`: `X-Amz-Date` is part of a SigV4 signature even though a date alone says little); or
it is one of the terse names of a known scheme (`SCHEME_NAMES`: Azure `se`/`skoid`, Qiniu `e`, Tencent
`t`/`us`, Akamai `hdnts`) too short to be words. A false positive costs swarming that one URL; a false
negative publishes someone's access grant.

Path segments are not judged by shape: content-addressed paths (`/packages/ab/cd/<sha256>/x.whl`,
`/blobs/sha256:...`) are the most shareable URLs there are and look exactly like path-embedded tokens
(Alibaba CDN types B/C, Tencent types B/C, Dropbox `/s/<id>/`). Only `;name=value` path parameters, path
segments of the form `name=value&...` (BunnyCDN's token path) and JWT segments (Cloudflare Stream) are.

`redact_url` applies the same judgement piece by piece, so it hides exactly what the gate refuses.
"""

from __future__ import annotations

import functools
import math
import re
from urllib.parse import SplitResult, unquote, unquote_plus, urlsplit, urlunsplit

URL = "url"
SCHEME = "scheme"
USERINFO = "userinfo"
SIGNED_URL = "signed-url"
SECRET_VALUE = "secret-value"

REDACTED = "REDACTED"  # what redact_url writes instead of a refused value, password or name

SCRUB_CACHE = 256  # URLs whose judgement is kept: the requests under way and just done
MAX_TEXT = 100  # a value or name longer than this is a blob, not a setting
MAX_WORD = 20  # longer single words are rare in URLs ("internationalization" is 20); random tokens are 16+
MAX_CLASS_CHANGES = 3  # lower/upper/digit switches a word may make: "iPhone15" and "ContentType" make 3
# What a value may hold, by `secret_bits`. A 64-bit token scores about 64, less what the English model
# explains away by chance; 40 leaves 24 bits for that, and of random 64-bit tokens of 20 shapes at most
# 0.5 % of any shape pass (bench/attacks/privacy_gate.py), while the words and versions of real download
# URLs score under it (`firefox-latest-ssl` 13, `linux-deb-x64` 37). Lower refuses real URLs, higher lets
# random letters through.
MAX_SECRET_BITS = 40.0
# log2 of the prior odds that a run of letters in a URL is a word rather than random: 16 to 1. Tuned with
# MAX_SECRET_BITS on the same measurement: at 5, 2% of dashed random letter groups pass; at 3, abbreviations
# cost so much that `os=linux-deb-x64` is refused.
WORD_PRIOR_BITS = 4.0

# Whole words of a parameter name that name a credential, signature, expiry or who someone is.
SECRET_WORDS = frozenset({
    # signatures and MACs (CloudFront/GCS/AWS v2 Signature, Azure sig, nginx md5, Tencent sign, Cloudflare
    # verify, CloudFront Policy, OAuth 1 nonce)
    "sig", "sign", "signed", "signature", "hmac", "mac", "hash", "digest", "md5", "sha1", "sha256", "sha512",
    "nonce", "verify", "policy",
    # bearer secrets: api keys (Google `key`, CloudFront Key-Pair-Id, Alibaba auth_key), passwords, one-time
    # codes, OAuth `code`/`state`/`code_verifier`, CAS `ticket`, SAML `RelayState`
    "token", "jwt", "bearer", "auth", "authkey", "authorization", "key", "apikey", "secret", "password",
    "passwd", "pwd", "pass", "passphrase", "otp", "pin", "credential", "credentials", "cred", "creds",
    "assertion", "ticket", "code", "state", "verifier", "challenge", "csrf", "xsrf",
    # sessions: a session in the URL is a cookie (`sid`, ColdFusion CFID)
    "session", "sess", "sid", "sessionid", "cfid", "cookie",
    # expiries and timestamps: they only make sense next to a signature, and a per-request time makes the
    # URL unique anyway (`expires`, `exp`, sourceforge `ts`)
    "expires", "expire", "expiry", "expiration", "exp", "deadline", "ttl", "ts", "timestamp", "time", "until",
    # who fetched it: telling strangers that is what the gate exists to prevent
    "user", "username", "userid", "uid", "login", "email",
})

# Substrings of the name with separators removed and lower-cased: compounds written as one word.
SECRET_STEMS = ("token", "secret", "passw", "signature", "sessid", "session", "apikey", "authkey",
                "accesskey", "privatekey", "hmac", "jwt", "credential", "nonce", "bearer", "expir", "oauth",
                "saml", "csrf", "xsrf", "googleaccessid")

# Every parameter of these signing schemes is part of the signature (algorithm, date, signed headers...).
SECRET_PREFIXES = ("x-amz-", "x-goog-", "x-oss-", "x-cos-", "x-obs-", "q-")  # S3/GCS/Alibaba/Tencent/Huawei

# Terse names of known schemes, matched whole (lower-cased): as words they would hit innocent names.
SCHEME_NAMES = frozenset({
    "se", "st", "skt", "ske", "skoid", "sktid", "saoid", "suoid", "scid", "si", "sip",  # Azure SAS
    "e",  # Qiniu and Limelight expiry, nginx secure_link's `st=..&e=..` variant
    "t", "us",  # Tencent CDN/VOD key: hex time, random string
    "hdnts", "hdnea", "hdntl",  # Akamai token auth
})

# Letter-bigram model of English words and identifiers: row = previous letter (`^` word start, then a..z),
# column = next letter (a..z, then `$` word end), entry = -log2 P(next | previous) in half bits, as one
# base-36 digit. Generated by `bench/attacks/privacy_gate.py --bigram-table` (Debian's wamerican dictionary and
# the standard library's identifiers); regenerate, do not edit.
_BIGRAM_ROWS = (
    "887899aa9dda8bb7f869bcahghz",
    "j989feafajc696jaj685bcdgcfg",
    "69ef6ijh6el5gg6hm7ae7jjmckd",
    "6mci7kl68r79hj5ji8c89knqdmd",
    "8efa4fcf5gkaee8gl98f9femdl8",
    "9ea6bcdgdkh8a7ebg559fceceia",
    "7igg67ij5nl7ii6hn7b97lkpbpb",
    "7hji5h987nk8da8hp78f8jhpcj8",
    "5fhg4gkh5mjcdd5inab99neqamb",
    "9c8a8baljlg8a48bia78galgpai",
    "4nki5hnk7nekkk5gnhek4kininb",
    "8dgf3egc5jf9eaaelc6ecmdrao9",
    "6feb5fgi5oe6eg7fni9b9fjm7mc",
    "58fg5gnj5okf9e67nh9h9kkpdpc",
    "8g876c4f8hcehb9ghg76cehlfic",
    "bbaaedagbkd88599k6997aafehf",
    "6hgh5hi87oi7hh68m6999lhqcrc",
    "fgkikknkfknfkgikfefi0kiknna",
    "6dba5ecg6kdcbb7dka79aegnbmb",
    "9g9h6gh87lcabc99fh749jdodn8",
    "7gch5fj84nlbfg8gq789akemaga",
    "9a9a9cak9kg785e9n667khmhjgh",
    "5ikk2jhk4onhij8hohgidfkmflc",
    "4dfc5fi85oeaf86fm99fglhhfjc",
    "8e7e6dha5oldeia6jed6adfbbh8",
    "8b9b7dce7jg989a7m96adgcggf6",
    "6hgi2mke5piafg8hmhggdhhpc8b",
)
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_BIGRAM_BITS = {(previous, following): int(cost, 36) / 2
                for previous, row in zip("^" + _LETTERS, _BIGRAM_ROWS) for following, cost in zip(_LETTERS + "$", row)}
_RUNS = re.compile(r"[0-9]+|[A-Z]?[a-z]+|[A-Z]+(?![a-z])")  # digits, words, camelCase parts, capitals
_HEX_WORD = re.compile(r"(?=.*[0-9])(?=.*[a-fA-F])(?:[0-9a-f]+|[0-9A-F]+)")

_PRINTABLE = re.compile(r"[\x21-\x7e]+")
_TEXT = re.compile(r"[A-Za-z0-9._~\-/,:+ ]*")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-\[\]]*")  # PHP's `arch[]=x64` included
_SEPARATORS = re.compile(r"[._~\-/,:+ \[\]]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
_LONG_NUMBER = re.compile(r"[0-9]{9}")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}|[0-9]{8}T[0-9]{4}", re.IGNORECASE)
_HEXISH = re.compile(r"(?=[a-f]*[0-9])(?=[0-9]*[a-f])[0-9a-f]{8,}", re.IGNORECASE)
_ASPNET_SESSION = re.compile(r"\([A-Za-z]\([^)]*\)\)")  # /(S(lit3py55t21z5v55vlm25s55))/page.aspx
_QUERY_SEPARATORS = re.compile(r"([&;])")  # `;` too: some servers split on it, `?a=1;sig=x` must not slip
_CONTROL = re.compile(r"[\x00-\x20\x7f]")
_LOOSE_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://(?:[^/?#]*@)?([^/?#@]*)([^?#]*)")
# What of a host the placeholder shows: a name or an IP literal and a numeric port. `http://u:pa/ss@h`
# does not parse (port "pa"), and its "host" must not show the "u:pa" a user meant as userinfo.
_LOOSE_HOST = re.compile(r"(?:[A-Za-z0-9.\-]+|\[[0-9A-Fa-f:.]*\]?)(?::[0-9]*)?")


# -- shapes ------------------------------------------------------------------------------------------------


def _class_changes(word: str) -> int:
    classes = ["d" if c.isdigit() else "u" if c.isupper() else "l" for c in word]
    return sum(a != b for a, b in zip(classes, classes[1:]))


def _english_bits(run: str) -> float:
    """How many bits likelier the bigram model finds these letters as a word than as uniformly random
    letters: about 0 a letter for the words of real URLs (half of them more), -2.4 for random letters."""
    letters = "^" + run.lower() + "$"
    return len(run) * math.log2(26) - sum(_BIGRAM_BITS[pair] for pair in zip(letters, letters[1:]))


def _word_bits(word: str) -> float:
    # A random word of n characters holds what it takes to write it out: log2(10) bits a digit and
    # log2(26) a letter, plus where the digits stand among the characters and the capitals among the
    # letters (log2 of the number of ways). So base36 counts 5.2 bits a character, base62 nearly its 6.0,
    # and the capital of `Algorithm` 3. Hex words count 4 a character. Each run of letters counts in
    # proportion to the probability that it is random rather than a word (Bayes, with WORD_PRIOR_BITS as
    # the prior odds): "stable" costs nothing, "xkqwpt" all of its bits.
    if _HEX_WORD.fullmatch(word):
        return 4.0 * len(word)
    digits = sum(c.isdigit() for c in word)
    capitals = sum(c.isupper() for c in word)
    bits = digits * math.log2(10) + math.log2(math.comb(len(word), digits) * math.comb(len(word) - digits, capitals))
    for run in _RUNS.findall(word):
        if not run.isdigit():
            bits += len(run) * math.log2(26) / (1 + 2 ** min(64.0, _english_bits(run) + WORD_PRIOR_BITS))
    return bits


def secret_bits(text: str) -> float:
    """An estimate of how many random bits `text` could hold: the sum over its words (split at separators,
    each distinct word once, since a repeat holds nothing new) of `_word_bits`. One measure for every shape
    of token: long or grouped digits, hex, base32/36/58/62/64, random letters alone or in dashed groups."""
    return sum(_word_bits(word) for word in dict.fromkeys(_SEPARATORS.split(text)) if word)


def _harmless_text(text: str, *, camel: bool = False) -> bool:
    """Short words, small numbers and versions only (the module docstring's "harmless shape")."""
    if len(text) > MAX_TEXT or not _TEXT.fullmatch(text):
        return False
    if _JWT.search(text) or _LONG_NUMBER.search(text) or _DATE.search(text):
        return False
    for word in _SEPARATORS.split(text):
        for part in _CAMEL.split(word) if camel else (word,):
            if len(part) > MAX_WORD or _HEXISH.fullmatch(part) or _class_changes(part) > MAX_CLASS_CHANGES:
                return False
    return secret_bits(text) < MAX_SECRET_BITS


def _harmless_name(name: str) -> bool:
    # camelCase is how names are written (`GoogleAccessId`, `productVersion`), so it splits words there.
    return bool(_NAME.fullmatch(name)) and _harmless_text(re.sub(r"[\[\]]", "-", name), camel=True)


def _name_words(name: str) -> list[str]:
    return [word.lower() for word in _SEPARATORS.split(_CAMEL.sub(" ", name)) if word]


def _credential_name(name: str) -> bool:
    lowered = name.lower()
    if lowered in SCHEME_NAMES or lowered.startswith(SECRET_PREFIXES):
        return True
    if any(word in SECRET_WORDS for word in _name_words(name)):
        return True
    squashed = re.sub(r"[^a-z0-9]", "", lowered)
    return any(stem in squashed for stem in SECRET_STEMS)


def _judge(raw_name: str, raw_value: str | None, *, plus: bool) -> tuple[str | None, bool]:
    """(reason to refuse or None, whether the name itself must be hidden) for one `name[=value]` piece."""
    decode = unquote_plus if plus else unquote
    try:
        name = decode(raw_name, errors="strict")
        value = None if raw_value is None else decode(raw_value, errors="strict")
    except UnicodeDecodeError:
        return SECRET_VALUE, True
    if not _harmless_name(name) or (value is None and not _harmless_text(name)):
        return SECRET_VALUE, True  # `?<token>` or `?%2573ig=`: the name may be the secret
    if _credential_name(name):
        return SIGNED_URL, False
    if value is not None and not _harmless_text(value):
        return SECRET_VALUE, False
    return None, False


# -- walking a URL: one pass both decides and redacts, so the two cannot disagree ------------------------


def _scrub_parameters(text: str, *, plus: bool) -> tuple[str, set[str]]:
    """`text` (a query, fragment, or `name=value&...` path segment) with refused pieces redacted, and the
    reasons to refuse."""
    out: list[str] = []
    reasons: set[str] = set()
    for piece in _QUERY_SEPARATORS.split(text):
        if piece in ("", "&", ";"):
            out.append(piece)
            continue
        name, equals, value = piece.partition("=")
        reason, hide_name = _judge(name, value if equals else None, plus=plus)
        if reason is None:
            out.append(piece)
            continue
        reasons.add(reason)
        out.append((REDACTED if hide_name else name) + ("=" + REDACTED if equals else ""))
    return "".join(out), reasons


def _scrub_path(path: str) -> tuple[str, set[str]]:
    out: list[str] = []
    reasons: set[str] = set()
    for segment in path.split("/"):
        whole = SECRET_VALUE if _JWT.search(segment) else SIGNED_URL if _ASPNET_SESSION.search(segment) else None
        if whole is not None:
            out.append(REDACTED)
            reasons.add(whole)
            continue
        head, *parameters = segment.split(";")
        pieces = []
        for text in ([head] if "=" in head else []) + parameters:
            scrubbed, found = _scrub_parameters(text, plus=False)
            pieces.append(scrubbed)
            reasons |= found
        out.append(";".join(pieces if "=" in head else [head, *pieces]))
    return "/".join(out), reasons


def _scrub_userinfo(netloc: str) -> tuple[str, set[str]]:
    if "@" not in netloc:
        return netloc, set()
    userinfo, _, host = netloc.rpartition("@")
    user, colon, _password = userinfo.partition(":")
    # Git hosts take a token as the user name (`https://ghp_...@github.com`): keep only a plain word.
    try:
        decoded = unquote(user, errors="strict")
        plain = _harmless_text(decoded) and not _credential_name(decoded)
    except UnicodeDecodeError:
        plain = False
    return f"{user if plain else REDACTED}{':' + REDACTED if colon else ''}@{host}", {USERINFO}


@functools.lru_cache(maxsize=SCRUB_CACHE)
def _scrub(url: str) -> tuple[SplitResult, str, frozenset[str]]:
    """The URL's parts, the URL with every refused piece redacted, and the reasons found. ValueError if it
    does not parse. Cached: every request asks it three times (the gate before and after the head, the access
    log), which was a tenth of the proxy's CPU per small request (`python -m bench.proxy_overhead`)."""
    parts = urlsplit(url)
    parts.port  # noqa: B018 - raises ValueError on a malformed port
    netloc, user_reasons = _scrub_userinfo(parts.netloc)
    path, path_reasons = _scrub_path(parts.path)
    query, query_reasons = _scrub_parameters(parts.query, plus=True)
    # A proxy never sees a fragment, but a caller may hand one over, and OAuth's implicit flow puts
    # `access_token` there (RFC 6749 §4.2.2).
    fragment, fragment_reasons = _scrub_parameters(parts.fragment, plus=True)
    reasons = frozenset(user_reasons | path_reasons | query_reasons | fragment_reasons)
    return parts, urlunsplit((parts.scheme, netloc, path, query, fragment)), reasons


# -- public -------------------------------------------------------------------------------------------------


def url_reason(url: str) -> str | None:
    """Why this URL may not be announced (one of the reasons in the module docstring), or None."""
    return _url_reason(url) if isinstance(url, str) else URL


@functools.lru_cache(maxsize=SCRUB_CACHE)
def _url_reason(url: str) -> str | None:
    """`url_reason` of a string. Cached as `_scrub` is: the publish gate asks it before and after the head."""
    if not _PRINTABLE.fullmatch(url):
        return URL
    try:
        parts, _, reasons = _scrub(url)
    except ValueError:
        return URL
    if parts.scheme.lower() not in ("http", "https"):
        return SCHEME
    if not parts.hostname:
        return URL
    # The most telling reason wins, not the first in the URL: Azure SAS starts with `sv=2020-08-04` (a date,
    # secret-value) but it is `sig` that makes it a signed URL.
    return next((reason for reason in (USERINFO, SIGNED_URL, SECRET_VALUE) if reason in reasons), None)


def redact_url(url: str) -> str:
    """`url` with the value of every parameter the gate refuses (query, fragment, `;path` parameters)
    replaced by REDACTED, and the userinfo password too; names and allowed values are kept. A name that
    may itself be the secret (`?<token>`, undecodable), a user name that is not a plain word, and a JWT or
    ASP.NET session path segment become REDACTED as a whole. Control characters and spaces are
    percent-encoded, so a log line stays one line. Never raises: a URL that does not parse becomes
    `scheme://host/path` (path parameters and JWT segments still redacted), or REDACTED if even that
    cannot be found.

    >>> redact_url("https://cdn.example/f.iso?md5=AUEnXC7T&expires=2147483647&lang=en")
    'https://cdn.example/f.iso?md5=REDACTED&expires=REDACTED&lang=en'
    """
    try:
        _, redacted, _ = _scrub(url)
    except Exception:  # noqa: BLE001 - a log or the admin API must never fail on a hostile URL
        return _placeholder(url)
    return _log_safe(redacted)


def _placeholder(url: object) -> str:
    try:
        match = _LOOSE_URL.match(url) if isinstance(url, str) else None
        if match is None:
            return REDACTED
        scheme, host, path = match.groups()
        host = host if _LOOSE_HOST.fullmatch(host) else REDACTED
        return _log_safe(f"{scheme}://{host}{_scrub_path(path)[0]}")
    except Exception:  # noqa: BLE001 - same promise as redact_url
        return REDACTED


def _log_safe(text: str) -> str:
    return _CONTROL.sub(lambda match: f"%{ord(match.group()):02X}", text)
