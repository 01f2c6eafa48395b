"""Cluster overlay mode: push a file from one host to many, topology-aware, coordinated through redis.

Agents on every host (`swarmproxy cluster agent`) take part in every transfer a pusher (`swarmproxy cluster push`)
publishes. The block engine is `swarm`'s (`SwarmService` over a redis-backed `Discovery`); this package adds the
overlay (who may talk to whom: rack, DC, root), throttle groups, work division, and the redis coordination.

Sans-I/O cores (fed with `now`, no redis, no asyncio): `overlay`, `throttle`, `division`, `records`.
Shells: `coord` (redis), `discovery`, `transport`, `agent`, `push`, `status`, `cli`. See docs/cluster.md.
"""
