"""The fallback download: one GET, origin first, the swarm when the origin is slow, one response in order.

`fallback` is the asyncio shell: it runs one `core.DownloadCore` per GET, feeds it the origin's head and body, the
lookups' answers, the swarm's chunks and the timer, and executes the actions it returns (`actions`). The decisions
are sans-I/O cores, each with `now` as an argument: the download core, its phases and its state (`core`, `state`),
when to leave the origin (`transition`, adapted per host by `adaptive`), when to wait for others fetching it and
what the download remembers of that (`parking`), when anything may be looked up or announced (`discovery_rule`).
`segments` takes a file segment by segment before anyone holds it whole; `ledger` keeps a download's books (what it
vouches for, what it recorded). Below this package: the engine (`proxy.engine`), the origin (`proxy.origin`,
`proxy.origin_head`), the spool; above it: the server and the configuration. Nothing below imports it
(`tests/test_layout.py`).
"""
