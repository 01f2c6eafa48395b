"""How many signed/credential URLs of the corpus would a tree's publish gate announce? (issue 19 item 4)

The corpus is tests/proxy/signed_url_corpus.py of the checkout this script lives in, loaded by path; the
gate is `proxy.publish_gate` of --tree (default: this checkout), so the same rows can be run against the
code before and after a change:

    git -C /work/main worktree add /tmp/base19gate HEAD
    .venv/bin/python bench/attacks/privacy_gate.py --tree /tmp/base19gate
    .venv/bin/python bench/attacks/privacy_gate.py

Each URL is put through `gate("GET", url, [], 200, <a swarmable response>)`, the decision that lets the
proxy store, announce and serve it. Prints JSON: rows the gate wrongly announces (the corpus expects a
refusal), rows it wrongly refuses (the corpus expects "ok"), and how many path-token known misses pass.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parents[2]
CORPUS_FILE = HERE / "tests" / "proxy" / "signed_url_corpus.py"
# A response the gate swarms, so that only the URL decides.
SWARMABLE = [("ETag", '"v1"'), ("Content-Length", "1000")]


def load_corpus():
    spec = importlib.util.spec_from_file_location("signed_url_corpus", CORPUS_FILE)
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


def measure(gate_module, corpus) -> dict:
    def announced(url: str) -> bool:
        return gate_module.gate("GET", url, [], 200, SWARMABLE).swarmable

    wrongly_announced = [name for name, url, expected in corpus.CORPUS if expected != "ok" and announced(url)]
    wrongly_refused = [name for name, url, expected in corpus.CORPUS if expected == "ok" and not announced(url)]
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
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=pathlib.Path, default=HERE,
                        help="checkout whose proxy/publish_gate.py to measure (default: %(default)s)")
    args = parser.parse_args(argv)
    tree = args.tree.resolve()
    gate_module = load_gate(tree)
    result = {"tree": str(tree), "gate": gate_module.__file__, "corpus": str(CORPUS_FILE),
              **measure(gate_module, load_corpus()),
              "command": " ".join([pathlib.Path(sys.executable).name, *sys.argv])}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
