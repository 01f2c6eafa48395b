"""The BitTorrent bridge: what this node shares is a BitTorrent v2 torrent stock clients can fetch and seed.

Our content root is BEP 52's `pieces root` and our block layer a layer of the same merkle tree, so a shared
content is a torrent without re-hashing (`swarm.content.torrent`). One embedded libtorrent session per node owns
everything BitTorrent (`session.BtSession`; the Internet mode will use the same session's DHT), seeding from the
block store's own data file, never a second copy (`seeder.Seeder`). Its settings are pinned in one pure module
(`settings`): no BitTorrent DHT, local peer discovery, port mapping or tracker until a mode turns one on on purpose.

- `errors` — the package's one error module.
- `settings` — the session's settings: what it may reach and how much a stranger may take (pure).
- `target` — what `swarmproxy get` is asked to fetch: a magnet link or a .torrent file read as a stranger's input,
  its one file and the v2 pieces root that verifies it (pure).
- `admission` — which sources the listener refuses: connections per address and network (pure).
- `watcher` — the thread that reads the session's alerts and applies the admission as libtorrent's IP filter.
- `session` — `BtSession`, the asyncio shell around the libtorrent session: listening, alerts, counters.
- `download` — a torrent the session downloads, and its swarm as a Range source of our fetch (`TorrentSource`).
- `mainline` — the session's Mainline DHT as a provider directory, for the Internet mode (`MainlineDirectory`).
- `seeder` — `Seeder`: follows `SwarmService.watch_shares`, seeds each content shared complete, stops the torrent
  before the content stops being shared (and only then lets the store evict it).

Imports `swarm` and `addresses`, never the proxy (`tests/test_layout.py`); the proxy wires it (`--bt-listen`).
"""
