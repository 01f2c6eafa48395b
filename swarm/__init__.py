"""The block engine: manifests, merkle hashing, block store, picker, wire protocol, transports.

`swarm` never imports `proxy` or `dht`. Built in pieces (see issue 3); so far:

- `swarm.errors`   — the package's one error module: `SwarmError`; peer faults derive from `PeerError`
  (`ProtocolError`, `ManifestError`, `HashMismatch`) so a bad peer is dropped, never the process.
- `swarm.merkle`   — BEP 52 merkle trees (SHA-256, 16 KiB leaves, identical to libtorrent's `pieces root`),
  streaming hashing, the block ("piece") layer, and checks of layers, layer ranges and blocks against a root.
- `swarm.manifest` — `Manifest` (size, block size, root, URL, validator, content type/encoding), the block-size
  rule `choose_block_size`, and a strict, versioned binary encoding.
- `swarm.wire`     — the sans-I/O peer wire codec: length-prefixed frames for every message; `swarm.wire_decoder`
  its `Decoder`, with a hard limit on every length, that raises only `ProtocolError` and holds what arrived, never
  what a header announced (a BLOCK only if the receiver admits it from its header).
- `swarm.store`    — the block store's contract: `BlockStore` protocol, `BlockLocation`, events; `swarm.store_base`
  the bookkeeping both stores share (entries, LRU, pins, cap, eviction); `swarm.store_memory.MemoryBlockStore`;
  `swarm.store_disk.DiskBlockStore` (per content root a sparse data file, a manifest + hash-layer record and an
  in-place verified bitmap; re-verified on load; LRU eviction of unpinned content under a size cap; disk errors →
  `StoreFailed` events, never a failed fetch).
- `swarm.picker`   — piece picker: block states, rarest-first/random, streaming window, endgame; its availability
  counts and (availability, rank)-ordered pickable blocks in `swarm.picker_availability`.
- `swarm.policy`   — request policy: per-source caps, timeouts and strikes, retry elsewhere, the origin as a
  capped source; returns actions (Request, Cancel, Drop, Discard) and `next_deadline()`.
- `swarm.trust`    — peer trust after libtorrent: -2 per hash failure, +1 per good block up to 8, ban at -7.
- `swarm.throttle` — token buckets and throttle groups with an injected clock.
- `swarm.origin_source` — the origin as a Range source: `Range` + `If-Range`, accepted only as a 206 whose
  `Content-Range` and validator match; failures are `OriginSourceError` (permanent or transient); its own cap.
- `swarm.fetch_core` / `swarm.serve_core` — the sans-I/O download and serving cores the node drives (serving:
  bounded request queue and sends in flight, handshake/idle/stall timeouts); `swarm.slots` — which connections
  keep a serving slot when more peers want one.
- `swarm.transport` — one connection abstraction (bounded send/receive buffers, clean close reasons) with
  `transport_memory` (in-process, fault injection), `transport_tcp` (sendfile for blocks on disk) and
  `transport_quic` (aioquic: a control stream plus one stream per block request; the connection in
  `transport_quic_connection`).
- `swarm.node` — `SwarmNode`, the asyncio shell (one fetch's in `swarm.fetch_run`): `start()` serves what the
  store shares, `seed_file()`, `fetch_manifest(root, peers)`, and `fetch(manifest, peers, origin=..., start=,
  end=, report=)`, an async iterator of verified bytes in order; `FetchFailed` when no source is left.
  `swarm.fetch_report.FetchReport` (also `swarm.FetchReport`): a fetch's counts for metrics.
- `swarm.discovery` — the `Discovery` protocol swarm takes (announce a root at an address, find its providers,
  put/get manifest claims under a key, withdraw; `node_id`, `own_host()`, `errors`) and the structural types it
  returns (`Provider`, `ManifestSummary`); `dht.discovery`'s classes satisfy it without either importing the other.
- `swarm.service` — `SwarmService`, a node's swarm over any `Discovery` and the life of each content in it:
  listeners per transport, provider lookup and picking, fetches that announce at once and take in providers as
  they appear, sharing with linger and withdrawal (`swarm.service_share`), filling the store from a downloaded
  body in a worker thread (`swarm.service_store`).
- `swarm.cli` — `swarmproxy swarm manifest | seed | get`.

Public API in short:

    node = SwarmNode(DiskBlockStore(dir), TcpTransport())
    await node.start("127.0.0.1", 0)
    manifest = await node.fetch_manifest(root, peers)
    async for chunk in node.fetch(manifest, peers, origin=OriginRangeSource(...)):
        ...
"""

from swarm.fetch_report import FetchReport

__all__ = ["FetchReport"]
