"""Origin-side plugins that publish each file's manifest (`Swarm-Manifest`), serve long hash layers and, while the
server is busy, ask swarm-aware clients to take the rest from peers (`Swarm-Hint: swarm`), holding the body of a
response whose client said it leaves at that hint (`Swarm-Accept: hint`) until it has left.

- `aiohttp_plugin`: `install(app, resolver)` for aiohttp servers;
- `asgi_plugin`: `SwarmMiddleware(app, resolver)` for any ASGI 3 application (Starlette, FastAPI, Django, ...);
- `publisher`: the framework-neutral part, manifests computed once and cached, the load counted;
- `fields`: the rules both plugins apply (which responses may carry the fields, the layer endpoint, files under a
  directory and the ETag each server gives them).

Imports only `swarm.content` of ours (docs/ARCHITECTURE.md).
"""
