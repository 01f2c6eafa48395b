"""A DHT node in its own process for the LAN discovery test (not a test module itself).

Usage: python -m tests.dht.lan_peer GROUP_PORT
Prints {"node_id": hex} once listening, then {"found": hex} for the first node that enters its routing table,
then exits. Exits with status 2 if nobody was found within 20 s.
"""

import asyncio
import json
import sys
from dataclasses import replace

from dht.identity import NodeIdentity
from dht.node import DhtNode
from tests.dht.conftest import TEST_CONFIG


class ReportingNode(DhtNode):
    found: asyncio.Event

    def on_message_from(self, message, address):
        super().on_message_from(message, address)
        if len(self.routing):
            self.found.set()


async def main(group_port: int) -> int:
    config = replace(TEST_CONFIG, lan_discovery=True, lan_port=group_port, lan_interval_s=0.5)
    node = ReportingNode(NodeIdentity.generate(), config)
    node.found = asyncio.Event()
    await node.start("127.0.0.1", 0, maintenance=False)
    print(json.dumps({"node_id": node.node_id.hex(), "lan": node.lan is not None}), flush=True)
    try:
        await asyncio.wait_for(node.found.wait(), 20)
    except TimeoutError:
        return 2
    finally:
        contacts = node.routing.contacts()
        print(json.dumps({"found": [c.node_id.hex() for c in contacts]}), flush=True)
        await node.stop(save=False)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(int(sys.argv[1]))))
