"""The privacy gate fails closed on random values of every shape, and keeps real download URLs shareable
(issue 35 §7). The shapes are tests/proxy/token_shapes.py, the URLs tests/proxy/data/public_download_urls.txt;
bench/attacks/privacy_gate.py measures the same against any tree."""

from __future__ import annotations

import pathlib

import pytest

from proxy import url_privacy
from proxy.publish_gate import redact_url
from proxy.url_privacy import REDACTED, url_reason

from . import token_shapes

URLS_FILE = pathlib.Path(__file__).parent / "data" / "public_download_urls.txt"
TOKENS_PER_SHAPE = 4000
MAX_SHAPE_PASS_RATE = 0.01

# Before issue 35 each of these was announced: 20 random letters (94 bits), dashed 8-digit groups (80), base32
# upper and lower (80, 70), base36 (72), dashed random letters (70), hex in groups of four (64), a licence key
# (80), 16 random capitals (75). Generated once from random.Random(3507) and Random(11).
ISSUE_35_TOKENS = [
    "ffemsdbhdpnzxjbnohvh",
    "14545194-97034186-88004184",
    "LXJEHM4IORSWTH55",
    "sbegzgsyebannd",
    "sztswcbwub6sj9",
    "vkx-zym-fxmej-erxd",
    "3de7-527f-cfde-f8a7",
    "LUSO-WIAY-CHI7-QL3R",
    "JTFRENWOKSLNKVHN",
]

# The public download URLs the gate refuses, each a decision: a value that is a whole path or a run of
# abbreviations scores as many bits as a token does, and the gate cannot tell them apart.
KNOWN_REFUSED = {
    # download redirectors that take a file path as a value
    "https://www.apache.org/dyn/closer.lua?path=/kafka/3.6.0/kafka_2.13-3.6.0.tgz&action=download",
    "https://www.apache.org/dyn/mirrors/mirrors.cgi?action=download&filename=tomcat/tomcat-10/v10.1.17/bin/"
    "apache-tomcat-10.1.17.tar.gz",
    "https://www.eclipse.org/downloads/download.php?file=/technology/epp/downloads/release/2023-12/R/"
    "eclipse-java-2023-12-R-linux-gtk-x86_64.tar.gz&r=1",
    "https://www.eclipse.org/downloads/download.php?file=/oomph/epp/2023-12/R/eclipse-inst-jre-linux64.tar.gz"
    "&mirror_id=1",
    "https://www.arduino.cc/download_handler.php?f=/arduino-1.8.19-linux64.tar.xz",
    "https://example.com/download?file=setup-2.4.1-x64.msi&mirror=eu",
    # abbreviations and product codes: win64-aarch64, O365ProPlusRetail, docs-driven-download-linux-amd64
    "https://download.mozilla.org/?product=firefox-nightly-latest-l10n-ssl&os=win64-aarch64&lang=ja",
    "https://c2rsetup.officeapps.live.com/c2r/download.aspx?ProductreleaseID=O365ProPlusRetail&platform=x64"
    "&language=en-us&version=O16GA",
    "https://desktop.docker.com/linux/main/amd64/docker-desktop-4.26.1-amd64.deb?utm_source=docker"
    "&utm_medium=webreferral&utm_campaign=docs-driven-download-linux-amd64",
    "https://desktop.docker.com/mac/main/arm64/Docker.dmg?utm_source=docker&utm_medium=webreferral"
    "&utm_campaign=docs-driven-download-mac-arm64",
    # `@` and `;` in a value (Google Fonts' axis syntax): refused before issue 35 too
    "https://fonts.googleapis.com/css2?family=Inter:wght@400;600&display=swap",
}


def public_download_urls() -> list[str]:
    lines = (line.strip() for line in URLS_FILE.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


@pytest.mark.parametrize("token", ISSUE_35_TOKENS)
def test_issue_35_tokens_are_not_announced(token):
    url = f"https://dl.example.com/f.iso?x={token}&lang=en"
    assert url_reason(url) == "secret-value"
    assert redact_url(url) == f"https://dl.example.com/f.iso?x={REDACTED}&lang=en"


@pytest.mark.parametrize("token", ISSUE_35_TOKENS)
def test_issue_35_tokens_are_not_announced_as_a_name_either(token):
    # `?<token>` and `?<token>=1`: the name may be the secret
    assert url_reason(f"https://dl.example.com/f.iso?{token}") == "secret-value"
    assert url_reason(f"https://dl.example.com/f.iso?{token}=1") == "secret-value"


@pytest.mark.parametrize("shape", token_shapes.SHAPES)
def test_random_tokens_of_every_shape_are_refused(shape):
    tokens = token_shapes.samples(shape, TOKENS_PER_SHAPE)
    assert min(bits for _, bits in tokens) >= token_shapes.MIN_BITS
    announced = [token for token, _ in tokens if url_reason(f"https://dl.example.com/f.iso?x={token}") is None]
    assert len(announced) <= MAX_SHAPE_PASS_RATE * TOKENS_PER_SHAPE, (len(announced), announced[:10])


def test_public_download_urls_stay_shareable():
    urls = public_download_urls()
    assert len(urls) >= 200 and len(set(urls)) == len(urls)
    refused = {url for url in urls if url_reason(url) is not None}
    assert refused == KNOWN_REFUSED
    assert 1 - len(refused) / len(urls) >= 0.95


def test_public_download_urls_are_left_alone_by_redaction():
    for url in public_download_urls():
        if url not in KNOWN_REFUSED:
            assert redact_url(url) == url


# the estimate itself (looked up at call time, so the attack tests above run against any version)


@pytest.mark.parametrize("value", ["stable", "download", "1.2.3", "20240115", "en-US", "x86_64", "linux-deb-x64",
                                   "firefox-latest-ssl", "iPhone15", "ContentType", "X-Amz-Algorithm"])
def test_words_versions_and_names_score_under_the_limit(value):
    assert url_privacy.secret_bits(value) < url_privacy.MAX_SECRET_BITS


@pytest.mark.parametrize("token", ISSUE_35_TOKENS)
def test_tokens_score_over_the_limit(token):
    assert url_privacy.secret_bits(token) >= url_privacy.MAX_SECRET_BITS


def test_a_repeated_word_counts_once():
    assert url_privacy.secret_bits("kafka/3.6.0/kafka-3.6.0") == url_privacy.secret_bits("kafka/3.6.0")


def test_digits_and_capitals_count_where_they_stand():
    # 12 characters: all lower case < with digits among them < with capitals too
    lower, digits, mixed = "qzxkvbnmtrpw", "qzx4vbn7trp2", "qZx4vBn7tRp2"
    assert url_privacy.secret_bits(lower) < url_privacy.secret_bits(digits) < url_privacy.secret_bits(mixed)
    assert url_privacy.secret_bits("cafe0123") == 32  # hex: 4 bits a character


def test_bigram_table_is_complete():
    assert len(url_privacy._BIGRAM_ROWS) == 27
    assert all(len(row) == 27 and all(c in "0123456789abcdefghijklmnopqrstuvwxyz" for c in row)
               for row in url_privacy._BIGRAM_ROWS)
