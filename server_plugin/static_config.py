"""The server configuration `swarmproxy manifest publish` prints (server_plugin/static_publish.py): nginx and
Apache text that sends each published file's `Swarm-Manifest` field and serves the hash-layer sidecars at
`LAYER_PREFIX` + root hex. Pure: published paths in, configuration text out.

nginx, two includes (`--config-dir` writes them as these files; without it both are printed):

    nginx-http.conf    inside `http { }`: `map $uri $swarm_manifest { default ""; "/files/a.iso" "root=…"; … }`
                       and the map's hash sizes (map_hash_bucket_size, map_hash_max_size) for these keys
    nginx-server.conf  inside `server { }`: `add_header Swarm-Manifest $swarm_manifest;` (nginx sends no field
                       whose value is empty, so only the published files get one) and the layer locations

Apache, one include (`apache.conf`, server or virtual-host context; mod_alias and mod_headers): one
`<LocationMatch>` per file with `Header set Swarm-Manifest "…"`, and an `Alias` of the layer path to the
sidecar directory. Apache walks every `<LocationMatch>` on each request: fine for thousands of files; for far more,
nginx's map is a hash lookup.

Keys are URL paths as nginx's `$uri` and Apache's `<LocationMatch>` see them: percent-decoded and normalised, so
a file "a b é.iso" served at /files/ is the key `/files/a b é.iso`, its bytes (UTF-8 or not) written as they
are. nginx compares map strings case-insensitively (ASCII), so paths that differ only in case get
case-sensitive regular expressions instead (`"~^/files/A\\.iso$"`), all of them: an exact key would win over
the regex and give one file the other's field.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from .fields import LAYER_CACHE_CONTROL, LAYER_TYPE
from .publisher import LAYER_PREFIX

NGINX_HTTP = "nginx-http.conf"
NGINX_SERVER = "nginx-server.conf"
APACHE = "apache.conf"
S3_SCRIPT = "s3-upload.sh"  # written by server_plugin/static_s3.py
SERVERS = {"nginx": (NGINX_HTTP, NGINX_SERVER), "apache": (APACHE,), "both": (NGINX_HTTP, NGINX_SERVER, APACHE),
           "s3": (S3_SCRIPT,)}

VARIABLE = "swarm_manifest"
INDEX_NAME = "index.json"  # the publisher's index in the layer directory: not served

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_AWKWARD = re.compile(r'[$*?\[\]"\\]')
# nginx's limits for a hash bucket (ngx_hash_init): the cache line it aligns to, the largest it accepts.
_CACHE_LINE = 64
_MAX_BUCKET = 32768
_MIN_MAX_SIZE = 2048  # nginx's own default map_hash_max_size


class Entry(NamedTuple):
    """One published file: its URL path (str from the file system's bytes, surrogate-escaped) and field value."""

    path: str
    header: str


def unusable_path(path: str) -> str | None:
    """Why a URL path cannot be named in a server configuration (None: it can)."""
    if _CONTROL.search(path):
        return "its name contains a control character"
    return None


def unusable_layers_dir(path: str) -> str | None:
    """Why the sidecar directory cannot be named in a configuration: nginx reads `$` in `alias` as a variable,
    Apache reads `* ? [ ]` in `<Directory>` as a pattern, neither can escape them; and Apache versions differ in
    what a backslash escapes in a quoted argument."""
    if _CONTROL.search(path) or _AWKWARD.search(path):
        return 'its path contains a control character or one of $ * ? [ ] " \\'
    return None


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def nginx_string(text: str) -> str:
    """A double-quoted nginx string: nginx unescapes only backslash-quote, backslash-backslash (and \\t \\r \\n)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def apache_string(text: str) -> str:
    """A double-quoted Apache argument, for text with no quote and no backslash pair: `path_regex`'s escapes
    (`\\.`, `\\xHH`) then reach the regex as written, whatever the Apache version does with `\\\\`."""
    if '"' in text or "\\\\" in text or text.endswith("\\"):
        raise ValueError(f"{text!r} cannot be quoted for Apache as it is")
    return f'"{text}"'


def path_regex(path: str) -> str:
    """An anchored, case-sensitive PCRE matching exactly `path`: ASCII letters, digits and `/_-` as they are, `.`
    as `\\.`, other ASCII as `\\xHH` (never a quote or a backslash pair a config parser would touch), bytes of
    non-ASCII characters as they are (PCRE without UTF mode compares bytes; with it, characters: both match)."""
    out = ["^"]
    for byte in _bytes(path):
        if byte >= 0x80 or chr(byte).isalnum() or chr(byte) in "/_-":
            out.append(_text(bytes([byte])) if byte >= 0x80 else chr(byte))
        elif byte == 0x2E:
            out.append("\\.")
        else:
            out.append(f"\\x{byte:02x}")
    out.append("$")
    return _text(_bytes("".join(out)))  # the surrogates of a non-UTF-8 name, back as one string


def _case_clashes(entries: Iterable[Entry]) -> set[str]:
    """The paths that share their ASCII-lowercased bytes with another (nginx's map would confuse them)."""
    seen: dict[bytes, list[str]] = {}
    for entry in entries:
        seen.setdefault(_bytes(entry.path).lower(), []).append(entry.path)
    return {path for group in seen.values() if len(group) > 1 for path in group}


def _hash_element(key: bytes) -> int:
    """Bytes one key takes in an nginx hash bucket (NGX_HASH_ELT_SIZE on a 64-bit machine)."""
    return 8 + ((len(key) + 2 + 7) & ~7)


def map_hash_sizes(keys: Sequence[bytes]) -> tuple[int, int]:
    """(map_hash_bucket_size, map_hash_max_size) with which nginx builds a map of `keys` without complaint.

    A bucket holds colliding keys; nginx tries table sizes up to the max size until no bucket overflows. Room for
    about eight of the longest keys per bucket keeps that table near the key count instead of its square."""
    longest = max((_hash_element(k) for k in keys), default=_hash_element(b""))
    bucket = _CACHE_LINE
    while bucket < min(8 * longest + 8, _MAX_BUCKET):
        bucket *= 2
    bucket = max(bucket, longest + 8)  # one key longer than 4 KB: a bucket of its own size (nginx's limit)
    return bucket, max(_MIN_MAX_SIZE, 4 * len(keys))


def _comment(text: str) -> str:
    return "".join(f"# {line}".rstrip() + "\n" for line in text.splitlines())


def printable_name(text: str) -> str:
    """`text` for a comment or a message line: no line break or other control character."""
    return _CONTROL.sub("?", text)


def nginx_http(entries: Sequence[Entry], source: str) -> str:
    """nginx-http.conf: the map from `$uri` to each file's field, and the hash sizes it needs."""
    clashes = _case_clashes(entries)
    exact = [_bytes(e.path) for e in entries if e.path not in clashes]
    bucket, max_size = map_hash_sizes(exact)
    lines = [_comment(
        f"Generated by `swarmproxy manifest publish` for {printable_name(source)} ({len(entries)} files); "
        "rerun it after\n"
        "files change, then `nginx -s reload`.\n"
        "Include this file inside http { }, and nginx-server.conf inside the server { } that serves the files.\n"
        "The map's hash sizes below fit these keys; nginx accepts each directive once per http { }: if your\n"
        "nginx.conf sets them already, delete them here and keep the larger values there.")]
    lines.append(f"map_hash_bucket_size {bucket};\n")
    lines.append(f"map_hash_max_size {max_size};\n")
    lines.append(f"map $uri ${VARIABLE} {{\n")
    lines.append('    default "";\n')
    for entry in entries:
        key = f"~{path_regex(entry.path)}" if entry.path in clashes else entry.path
        lines.append(f"    {nginx_string(key)} {nginx_string(entry.header)};\n")
    lines.append("}\n")
    return "".join(lines)


def nginx_server(layers_dir: str) -> str:
    """nginx-server.conf: the field on every response of the server, and the sidecars at the layer path."""
    prefix = LAYER_PREFIX
    return _comment(
        "Generated by `swarmproxy manifest publish`. Include this file inside the server { } that serves the\n"
        "files. nginx inherits add_header only into locations that have no add_header of their own: repeat the\n"
        "add_header Swarm-Manifest line in every location serving published files that has one.") + (
        f"add_header Swarm-Manifest ${VARIABLE};\n"
        "\n"
        f"# The hash layers: {LAYER_TYPE}, cacheable (a layer is named by its root and never changes).\n"
        f"location ^~ {prefix} {{\n"
        f"    alias {nginx_string(layers_dir.rstrip('/') + '/')};\n"
        "    types { }\n"
        f"    default_type {LAYER_TYPE};\n"
        f"    add_header Cache-Control {nginx_string(LAYER_CACHE_CONTROL)};\n"
        "}\n"
        f"location = {prefix}{INDEX_NAME} {{\n"
        "    return 404;\n"
        "}\n")


def apache(entries: Sequence[Entry], layers_dir: str, source: str) -> str:
    """apache.conf: a `<LocationMatch>` per file, and the sidecar directory aliased at the layer path."""
    directory = layers_dir.rstrip("/")
    lines = [_comment(
        f"Generated by `swarmproxy manifest publish` for {printable_name(source)} ({len(entries)} files); "
        "rerun it after\n"
        "files change, then `apachectl graceful`. Include this file in the server or <VirtualHost> context that\n"
        "serves the files; it needs mod_alias and mod_headers (a2enmod alias headers).")]
    lines.append(
        f"# The hash layers: {LAYER_TYPE}, cacheable (a layer is named by its root and never changes).\n"
        f"Alias {apache_string(LAYER_PREFIX)} {apache_string(directory + '/')}\n"
        f"<Directory {apache_string(directory)}>\n"
        "    Require all granted\n"
        "    Options None\n"
        "    AllowOverride None\n"
        f"    ForceType {LAYER_TYPE}\n"
        f"    Header set Cache-Control {apache_string(LAYER_CACHE_CONTROL)}\n"
        f"    <Files {apache_string(INDEX_NAME)}>\n"
        "        Require all denied\n"
        "    </Files>\n"
        "</Directory>\n"
        "\n"
        "# Each published file's field, by its URL path (percent-decoded, as Apache matches it).\n")
    for entry in entries:
        lines.append(f"<LocationMatch {apache_string(path_regex(entry.path))}>\n"
                     f"    Header set Swarm-Manifest {apache_string(entry.header)}\n"
                     "</LocationMatch>\n")
    return "".join(lines)


def render(server: str, entries: Sequence[Entry], layers_dir: str, source: str) -> dict[str, str]:
    """The configuration files for `server` (a key of SERVERS), by file name."""
    makers = {NGINX_HTTP: lambda: nginx_http(entries, source), NGINX_SERVER: lambda: nginx_server(layers_dir),
              APACHE: lambda: apache(entries, layers_dir, source)}
    return {name: makers[name]() for name in SERVERS[server]}


def printable(files: dict[str, str]) -> str:
    """All files as one text for stdout, each under a comment naming it and where it goes."""
    where = {NGINX_HTTP: "nginx, inside http { }", NGINX_SERVER: "nginx, inside server { }",
             APACHE: "Apache, server or <VirtualHost> context", S3_SCRIPT: "run it with sh"}
    return "\n".join(f"# ==== {name} ({where[name]}) ====\n{text}" for name, text in files.items())

