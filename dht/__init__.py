"""Discovery: provider and manifest records over a hardened Kademlia DHT, plus LAN discovery.

`dht` imports nothing else of swarmproxy. Not built yet (see issue 4).
"""
