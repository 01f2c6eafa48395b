"""What does a tree's publish gate announce that it must not, and refuse that it should share? (issues 19, 35)

Three measurements, each put through `gate("GET", url, [], 200, <a swarmable response>)`, the decision that
lets the proxy store, announce and serve a URL:

- the signed-URL corpus (tests/proxy/signed_url_corpus.py): rows wrongly announced or wrongly refused;
- random secrets of at least 64 bits in every shape of tests/proxy/token_shapes.py, each as the value of
  a parameter whose name says nothing (`?x=<token>`): the share of each shape the gate announces;
- real public download URLs (tests/proxy/data/public_download_urls.txt): the share it keeps shareable,
  overall and among those with a query string (the only part whose values it judges).

The corpora come from the checkout this script lives in, loaded by path; the gate is `proxy.publish_gate`
of --tree (default: this checkout), so the same rows can be run against the code before and after a change:

    mkdir /tmp/head && git -C /work/main archive HEAD | tar -x -C /tmp/head
    .venv/bin/python bench/attacks/privacy_gate.py --tree /tmp/head --markdown
    .venv/bin/python bench/attacks/privacy_gate.py --markdown

Prints JSON (or, with --markdown, the per-shape table). `--bigram-table` instead prints the letter-bigram
table of proxy/url_privacy.py, made from /usr/share/dict/american-english (Debian's wamerican) and the
words of the running Python's standard library (Lib/*.py).
"""

from __future__ import annotations

import argparse
import collections
import glob
import importlib
import importlib.util
import json
import math
import pathlib
import re
import string
import sys
import sysconfig

HERE = pathlib.Path(__file__).resolve().parents[2]
CORPUS_FILE = HERE / "tests" / "proxy" / "signed_url_corpus.py"
SHAPES_FILE = HERE / "tests" / "proxy" / "token_shapes.py"
URLS_FILE = HERE / "tests" / "proxy" / "data" / "public_download_urls.txt"
DICTIONARY = pathlib.Path("/usr/share/dict/american-english")
# A response the gate swarms, so that only the URL decides.
SWARMABLE = [("ETag", '"v1"'), ("Content-Length", "1000")]


def load_file(path: pathlib.Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_gate(tree: pathlib.Path):
    # First on sys.path, so the tree's `proxy` wins over an installed or editable one.
    sys.path.insert(0, str(tree))
    module = importlib.import_module("proxy.publish_gate")
    if pathlib.Path(module.__file__).resolve().parents[1] != tree:
        raise SystemExit(f"imported {module.__file__}, not the gate of {tree}")
    return module


def public_download_urls(path: pathlib.Path = URLS_FILE) -> list[str]:
    lines = (line.strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def measure(gate_module, corpus, shapes, tokens: int) -> dict:
    def announced(url: str) -> bool:
        return gate_module.gate("GET", url, [], 200, SWARMABLE).swarmable

    wrongly_announced = [name for name, url, expected in corpus.CORPUS if expected != "ok" and announced(url)]
    wrongly_refused = [name for name, url, expected in corpus.CORPUS if expected == "ok" and not announced(url)]
    passed = {shape: sum(announced(f"https://dl.example.com/f.iso?x={token}")
                         for token, _ in shapes.samples(shape, tokens)) / tokens
              for shape in shapes.SHAPES}
    urls = public_download_urls()
    refused = [url for url in urls if not announced(url)]
    with_query = [url for url in urls if "?" in url]
    return {
        "rows": len(corpus.CORPUS),
        "rows_to_refuse": sum(expected != "ok" for _, _, expected in corpus.CORPUS),
        "rows_to_announce": sum(expected == "ok" for _, _, expected in corpus.CORPUS),
        "wrongly_announced": len(wrongly_announced),
        "issue_19_rows_announced": sum(announced(url) for _, url, _ in corpus.ISSUE_19),
        "wrongly_refused": len(wrongly_refused),
        "known_path_token_misses_announced": sum(announced(url) for _, url in corpus.KNOWN_MISSES),
        "wrongly_announced_ids": wrongly_announced,
        "wrongly_refused_ids": wrongly_refused,
        "tokens_per_shape": tokens,
        "token_shapes_announced": passed,
        "worst_shape": max(passed, key=passed.get),
        "public_urls": len(urls),
        "public_urls_shareable": round(1 - len(refused) / len(urls), 4),
        "public_urls_with_query": len(with_query),
        "public_urls_with_query_shareable": round(1 - sum(url in refused for url in with_query) / len(with_query), 4),
        "public_urls_refused": refused,
    }


def markdown(result: dict) -> str:
    lines = [f"gate: {result['gate']}", "", "| shape (>= 64 bits, `?x=<token>`) | announced |", "| --- | ---: |"]
    lines += [f"| {shape} | {rate:.2%} |" for shape, rate in result["token_shapes_announced"].items()]
    lines += ["", f"public download URLs shareable: {result['public_urls_shareable']:.2%} of {result['public_urls']}"
              f" ({result['public_urls_with_query_shareable']:.2%} of the {result['public_urls_with_query']} with a"
              " query)", f"signed-URL corpus: {result['wrongly_announced']} wrongly announced,"
              f" {result['wrongly_refused']} wrongly refused"]
    return "\n".join(lines)


# -- the letter-bigram table of proxy/url_privacy.py ---------------------------------------------------------


def _words(text: str) -> list[str]:
    # camelCase splits as url_privacy splits it: `ContentType` is two words, `HTML` one
    return [part.lower() for word in re.findall(r"[A-Za-z]+", text)
            for part in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", word)]


def bigram_table() -> list[str]:
    """27 rows (word start, a..z) of 27 characters (a..z, word end): the cost in half bits, as a base-36
    digit, of the next letter given the previous one.

    Counted over distinct words (types), not running text: a URL's words are names, not prose, and a common
    word should not teach the model more than a rare one. Letter pairs come from an English dictionary and
    the identifiers and comments of the standard library; word ends from the standard library alone, since
    a dictionary's inflections (-s, -ed, -ly) would make any short run of letters look like a word's end,
    and URL words are names and abbreviations, not inflected words. Add-0.5 smoothing keeps an unseen pair
    finite (17.5 bits at most, the cap of one base-36 digit)."""
    if not DICTIONARY.exists():
        raise SystemExit(f"{DICTIONARY} is missing: apt-get install wamerican")
    english = {line.lower() for line in DICTIONARY.read_text().split("\n") if re.fullmatch(r"[A-Za-z]+", line)}
    identifiers: set[str] = set()
    for path in sorted(glob.glob(f"{sysconfig.get_paths()['stdlib']}/*.py")):
        identifiers.update(_words(pathlib.Path(path).read_text(errors="ignore")))
    counts = collections.Counter((a, b) for word in english | identifiers for a, b in zip("^" + word, word))
    counts.update((word[-1], "$") for word in identifiers)
    letters = string.ascii_lowercase
    rows = []
    for a in "^" + letters:
        total = sum(counts[a, b] for b in letters + "$")
        costs = (-math.log2((counts[a, b] + 0.5) / (total + 0.5 * 27)) for b in letters + "$")
        rows.append("".join((string.digits + letters)[min(35, round(2 * cost))] for cost in costs))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=pathlib.Path, default=HERE,
                        help="checkout whose proxy/publish_gate.py to measure (default: %(default)s)")
    parser.add_argument("--tokens", type=int, default=4000, help="random tokens per shape (default: %(default)s)")
    parser.add_argument("--markdown", action="store_true", help="print the per-shape table, not JSON")
    parser.add_argument("--bigram-table", action="store_true", help="print url_privacy's bigram table and exit")
    args = parser.parse_args(argv)
    if args.bigram_table:
        print("\n".join(f'    "{row}",' for row in bigram_table()))
        return
    tree = args.tree.resolve()
    gate_module = load_gate(tree)
    result = {"tree": str(tree), "gate": gate_module.__file__, "corpus": str(CORPUS_FILE),
              **measure(gate_module, load_file(CORPUS_FILE, "signed_url_corpus"),
                        load_file(SHAPES_FILE, "token_shapes"), args.tokens),
              "command": " ".join([pathlib.Path(sys.executable).name, *sys.argv])}
    print(markdown(result) if args.markdown else json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
