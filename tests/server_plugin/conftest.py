"""The plugin's tests run on uvloop, as the proxy's do (tests/proxy/conftest.py says why): the end-to-end test
drives a swarmproxy node, and the servers the plugin runs in (aiohttp, uvicorn) use uvloop where it is installed."""

from tests.proxy.conftest import _uvloop


def pytest_asyncio_loop_factories(config, item):
    return {"uvloop": _uvloop}
