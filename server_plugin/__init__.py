"""Origin-side middleware (ASGI and aiohttp) that publishes manifests and overload hints.

Imports only `swarm.manifest`. Not built yet.
"""
