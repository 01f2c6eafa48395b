"""The plugin's tests run on uvloop, as the proxy's do (tests/proxy/conftest.py says why): the end-to-end test
drives a swarmproxy node, and the servers the plugin runs in (aiohttp, uvicorn) use uvloop where it is installed."""

import anyio

from tests.proxy.conftest import _uvloop

# anyio (under Starlette) imports its modules on first use, and pytest rewrites them as they load (anyio is a
# pytest plugin). Loaded deep inside a served request, CPython 3.11's parser can fail with "AST constructor
# recursion depth mismatch" (seen once in CI, in Starlette's FileResponse). Load them all here, at the top.
for _name in dir(anyio):
    getattr(anyio, _name)


def pytest_asyncio_loop_factories(config, item):
    return {"uvloop": _uvloop}
