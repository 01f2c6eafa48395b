"""Origin-side middleware (ASGI and aiohttp) that publishes manifests and overload hints.

Imports only `swarm.content.manifest`. Not built yet.
"""
