"""The block engine: content identity, sans-I/O cores, block store, peer wire and transports, and the service.

`swarm` never imports `proxy` or `dht` (`tests/test_layout.py`); docs/ARCHITECTURE.md draws the layers. Its
sub-packages, from the bottom up:

- `swarm.errors` — the package's one error module: `SwarmError`; peer faults derive from `PeerError`
  (`ProtocolError`, `ManifestError`, `BencodeError`, `HashMismatch`) so a bad peer is dropped, never the process.
- `swarm.content` — what a content is, pure hashing (the origin-side plugin's only import):
  `merkle` (BEP 52 trees: SHA-256, 16 KiB leaves, identical to libtorrent's `pieces root`; streaming hashing,
  the block layer, checks of layers and blocks against a root) and `manifest` (`Manifest`: size, block size,
  root, URL, validator, content type/encoding; the block-size rule; a strict, versioned binary encoding), and
  `sizes` (sizes, rates and block sizes as every command's flags read them: `64k` is 65536 everywhere), and
  `torrent` (the content as a canonical BitTorrent v2 torrent, from its manifest and block layer, no re-hash;
  and a bounded, strict decoder of strangers' bencoded bytes).
- `swarm.core` — every decision as a call with `now` that returns actions: `picker` (block states,
  rarest-first/random, streaming window, endgame; counts and ranks in `availability`), `policy` (per-source
  caps, timeouts and strikes, the origin as a capped source), `trust` (libtorrent's: -2 per hash failure, +1 per
  good block up to 8, ban at -7), `throttle` (token buckets and groups), `fetch` and `serve` (one download's and
  one peer's serving decisions), `slots` (which connections keep a serving slot).
- `swarm.store` — where verified blocks live: `interface` (the `BlockStore` contract, `BlockLocation`, events),
  `entries` (bookkeeping both stores share: entries, LRU, pins, cap, eviction), `memory`, and `disk` (per root a
  sparse data file, a manifest + hash-layer record and a verified bitmap; re-verified on load; disk errors are
  `StoreFailed` events, never a failed fetch).
- `swarm.net` — peers on the wire: `wire` (the sans-I/O codec) and `decoder` (hard limits on every length; holds
  what arrived, never what a header announced), `transport` (one connection abstraction with bounded buffers)
  and its `tcp` (sendfile for blocks on disk), `quic` (aioquic; one stream per block request, the connection in
  `quic_connection`) and `memory` (in-process, fault injection) implementations.
- `swarm.service` — the asyncio shells: `node.SwarmNode` serves what the store shares and fetches (`fetch_run`)
  verified bytes in order from peers and the origin as a Range source (`origin_source`), counting into a
  `report.FetchReport`; `swarm_service.SwarmService` runs each content's life over any `Discovery` (providers,
  fetches that announce at once, sharing with linger and withdrawal in `shares`, which tells watchers what starts
  and stops being shared; filling the store from a downloaded body in `store_work`).
- `swarm.trust` — whom to believe: the claims' vocabulary (`claims`: `ManifestClaim`, `Vouch` with its
  `Attestation`), the policy, the quorum, one lookup's judgement.
- `swarm.discovery` — the seam discovery backends implement (`seam`: a provider directory and a claim store;
  `dht` and `cluster` implement both), several backends as one (`composite`), and one in memory (`memory`).
- `swarm.cli` — `swarmproxy swarm manifest | seed | get`.

In short:

    node = SwarmNode(DiskBlockStore(dir), TcpTransport())
    await node.start("127.0.0.1", 0)
    manifest = await node.fetch_manifest(root, peers)
    async for chunk in node.fetch(manifest, peers, origin=OriginRangeSource(...)):
        ...
"""

from swarm.service.report import FetchReport

__all__ = ["FetchReport"]
