"""The browser half at internet scale: a discrete-event flash-crowd simulator around the real download cores.

Issue 40, scenario 5 (and issue 39's lookups at Mainline's scale). Every simulated client drives the product's own
sans-I/O cores on a virtual clock: `proxy.download.core.DownloadCore` (origin, transition, parking, discovery
rule), `swarm.core.fetch.FetchCore` (the block picker, request policy and trust of a swarm fetch) and
`swarm.trust.judge` (the quorum rule over the claims and vouches a lookup returns). What the asyncio shells do
with their actions, and the origin, the network and the DHT, are models (`models`, `node`); each module says
which behaviour it reproduces rather than runs.

- `events`: the virtual clock (a heap of timed callbacks);
- `models`: the origin (SlowOrigin's shared token bucket, fair FIFO per 16 KiB chunk, server_plugin's hint), the
  links (per-host FIFO up/down caps and a one-way delay) and the DHT (lookup latency, announce visibility,
  expiry; ours or Mainline);
- `node`: one client's download: the fallback shell's part (`proxy.download.fallback`), reproduced;
- `swarm_fetch`: the block engine's shell around the real `FetchCore` (peers serving at their uplink);
- `world`: a crowd (Poisson arrivals, the swarm half and the direct half) and its figures;
- `lab`: `swarmproxy lab crowd-scale` (report.json, summary.txt, figure.png, honesty checks).
"""
