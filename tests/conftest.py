"""The whole suite: nothing it starts ever joins the public network.

`bittorrent.settings.PRIVATE_NETWORK_ENV` set here holds for this process and every process a test starts (they
inherit the environment): `bootstrap_routers` then gives no public router, whatever a node is asked
(`tests/bittorrent/test_mainline.py` checks it).
"""

from __future__ import annotations

import os

from bittorrent.settings import PRIVATE_NETWORK_ENV

os.environ[PRIVATE_NETWORK_ENV] = "1"
