"""The lab and the benchmarks. Nothing they start joins the public network: `PRIVATE_NETWORK_ENV`, set here, holds
for every bench and every process it starts (`bittorrent.settings.bootstrap_routers`)."""

from __future__ import annotations

import os

from bittorrent.settings import PRIVATE_NETWORK_ENV

os.environ[PRIVATE_NETWORK_ENV] = "1"
