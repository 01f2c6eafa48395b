"""The block engine: manifests, merkle hashing, block store, picker, wire protocol, transports.

`swarm` never imports `proxy` or `dht`. Not built yet (see issue 3).
"""
