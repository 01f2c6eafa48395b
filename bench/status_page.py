"""The status page (`/_swarm/`, issue 41): its load time with 1,000 requests recorded, and its screenshots.

    python -m bench.status_page [--screenshots docs/screenshots] [--loads 7]

Run on purpose, never by the tests (scripts/status-page-screenshots.sh runs it). A local swarm on loopback (the
demo's: three nodes, our DHT, nothing off this machine): two nodes fetch files from a local origin, which then
slows down; the third, the one photographed, keeps 1,000 requests in its history (`--request-history 1000`), gets
the files from the other two while the page watches (switches, peers and their rates, bytes saved), and the page is
loaded `--loads` times in Debian's Chromium: the load time is from navigation start to the first figures on screen
(the page's `swarmproxy-first-render` mark, after its first poll). Prints JSON; writes the screenshots.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import pathlib
import statistics
import sys
import tempfile
import threading
import time

os.environ.setdefault("SWARMPROXY_PRIVATE_NETWORK", "1")  # (bench/__init__.py sets it too: never the public DHT)

from proxy.demo.local_swarm import Cluster  # noqa: E402
from proxy.demo.slow_origin import SlowOrigin  # noqa: E402
from swarm.core.throttle import TokenBucket  # noqa: E402

SEED_UPLOAD = 400_000.0  # bytes/s each seed sends
CHROMIUM = os.environ.get("SWARMPROXY_CHROMIUM", "/usr/bin/chromium")
SIZE = 6 * 1024 * 1024
SLOW_RATE = 100_000.0  # bytes/s for everyone at the origin once the first two nodes have the files: under R


class Swarm:
    """The origin and the cluster, on an event loop in a thread of their own (Playwright's sync API owns this one)."""

    def __init__(self, tmp: pathlib.Path) -> None:
        self.tmp = tmp
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="swarm", daemon=True).start()

    def run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(600)

    def spawn(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    async def start(self) -> None:
        self.origin = SlowOrigin()
        await self.origin.start()
        self.files = [self.origin.add(f"/releases/image-{i}.iso",
                                      (hashlib.sha256(b"status page %d" % i).digest() * (SIZE // 32))[:SIZE])
                      for i in range(3)]
        # discover-size 0: the seeds announce what they fetched fast (by default only files a slow origin served)
        self.cluster = Cluster(self.tmp, first_host=60, log_level="WARNING", discover_size="0")
        seeds = [await self.cluster.add() for _ in range(2)]
        for seed in seeds:
            for url in self.files:
                await self.cluster.get(seed, url)
            # Each seed uploads at SEED_UPLOAD: on loopback a fetch from peers would be over between two of the
            # page's polls, and the screenshot is to show the peers at work.
            for node in seed.engine.service.nodes.values():
                node.upload = TokenBucket(SEED_UPLOAD)
        self.node = await self.cluster.add(request_history="1000")
        self.address = self.node.addresses["proxy"]

    def fill_history(self, count: int) -> None:
        """`count` finished records, as many small downloads would leave (the page's worst case is their number)."""
        stats = self.node.stats
        for i in range(count):
            record = stats.begin("GET", f"http://mirror.example.org/pool/main/p/pkg{i:04d}/pkg_{i}.deb", "127.0.0.1")
            record.bytes_origin = 40_000 + 37 * i
            record.bytes_peers = (20_000 if i % 7 == 0 else 0)
            record.transition = "R" if i % 7 == 0 else None
            record.swarm_skipped = None if i % 7 == 0 else ("no-validator" if i % 3 else "private")
            stats.finish(record, 200, record.bytes_origin + record.bytes_peers, 0.05 + (i % 10) / 100)

    async def slow_download(self, url: str) -> None:
        self.origin.set_rate(SLOW_RATE)
        await self.cluster.get(self.node, url)

    async def stop(self) -> None:
        await self.cluster.close()
        await self.origin.stop()


def first_render_ms(page) -> float:
    page.wait_for_function("() => performance.getEntriesByName('swarmproxy-first-render').length > 0")
    return float(page.evaluate("() => performance.getEntriesByName('swarmproxy-first-render')[0].startTime"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--screenshots", type=pathlib.Path, default=None,
                        help="where to write status-page-*.png (default: none taken)")
    parser.add_argument("--loads", type=int, default=7, help="page loads timed (default 7)")
    parser.add_argument("--records", type=int, default=1000, help="requests in the history (default 1000)")
    args = parser.parse_args(argv)
    if not os.access(CHROMIUM, os.X_OK):
        print(f"{CHROMIUM} is missing (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="swarmproxy-status-page-") as tmp:
        swarm = Swarm(pathlib.Path(tmp))
        swarm.run(swarm.start())
        try:
            async def fill() -> None:
                swarm.fill_history(args.records)
            swarm.run(fill())
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--headless=new"])
                context = browser.new_context(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
                context.set_default_timeout(60_000)
                url = f"http://{swarm.address}/_swarm/"
                loads = []
                for _ in range(args.loads):
                    page = context.new_page()
                    page.goto(url)
                    loads.append(first_render_ms(page))
                    rows = page.locator("#recent tr.record").count()
                    page.close()
                # The swarm at work while the page watches: three slow downloads finished from peers.
                page = context.new_page()
                page.goto(url)
                first_render_ms(page)
                shot = None
                for i, file_url in enumerate(swarm.files):
                    running = swarm.spawn(swarm.slow_download(file_url))
                    if i == len(swarm.files) - 1 and args.screenshots is not None:
                        # Mid-download: the row under way and the peers it fetches from, with their rates.
                        page.wait_for_function("""() => [...document.querySelectorAll('#peers tbody tr')]
                            .some(r => /[1-9]/.test(r.children[6].textContent))""")
                        args.screenshots.mkdir(parents=True, exist_ok=True)
                        shot = args.screenshots / "status-page-live.png"
                        page.screenshot(path=str(shot), full_page=False)
                    running.result(600)
                if args.screenshots is not None:
                    # Afterwards: the three downloads done, the newest one's decisions opened.
                    page.wait_for_function("() => !document.querySelector('#under-way tr.record')")
                    page.locator("#recent tr.record td.url").first.click()
                    page.locator("#recent tr.details").wait_for()
                    height = page.evaluate("() => document.querySelector('#recent tr.details').getBoundingClientRect()"
                                           ".bottom + window.scrollY + 200")
                    page.screenshot(path=str(args.screenshots / "status-page-after.png"), full_page=True,
                                    clip={"x": 0, "y": 0, "width": 1280, "height": height})
                browser.close()
        finally:
            swarm.run(swarm.stop())
    print(json.dumps({
        "command": "python -m bench.status_page " + " ".join(argv if argv is not None else sys.argv[1:]),
        "records": args.records, "rows_shown": rows,
        "first_render_ms": {"median": round(statistics.median(loads), 1), "max": round(max(loads), 1),
                            "all": [round(x, 1) for x in loads]},
        "screenshots": None if args.screenshots is None else str(args.screenshots),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
