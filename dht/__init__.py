"""Discovery: provider and manifest records over a hardened Kademlia DHT, plus LAN discovery.

`dht` imports nothing else of swarmproxy but the discovery seam it implements (`swarm.discovery.seam`: the
vocabulary of claims and providers, and their bounds). What other packages use:

* `dht.discovery` — `DhtDiscovery` (over a `DhtNode`): both roles of the seam, a provider directory and a claim
  store whose claims come back as `Vouch`es with their publisher's address attested by the storing nodes.
* `dht.node` — `DhtNode` (``from_data_dir``, ``start(host, port)``, ``bootstrap([(host, port), ...])``,
  ``announce``/``withdraw``, ``find_providers``, ``put_manifest``/``get_manifests``, ``find_node``, ``ping``,
  ``external_host()``/``own_host()``, ``stats()`` for ``GET /_swarm/dht``, ``stop()``) and
  `dht.config.DhtConfig` (k, alpha, timeouts, TTLs, rate and store limits, contacts per IP, LAN discovery — on by
  default, ``lan_discovery=False`` is ``--no-lan-discovery``).
* `dht.records` — `representation_key(url, validator)` (the only form in which a URL reaches the DHT),
  `ProviderRecord`, `ManifestRecord`, `Transport`.
* `addresses.network_prefix(host)` (the bottom module `addresses`): the unit in which independent parties are
  counted, and `canonical_host`. `dht.attestation` — which publisher hosts storing nodes vouch they observed.
* `dht.identity` — `NodeIdentity` (an Ed25519 key; node id = SHA-256(public key)[:20]); `dht.key_file` keeps it
  in the data dir.
* `dht.errors` — `LocalError` (our side) vs `PeerError` (a remote node's bad input) and their subclasses.

Internals, each a pure core or a thin shell: `responder` (answers one request), `storage` (record store with
caps, expiry, replay protection, the address each record arrived from),
`admission` (per-source token buckets, write tokens), `lookup` (iterative lookup state machine), `announcements`
(refresh schedule), `wire` (datagram codec), `protocol` (guarded UDP endpoint), `routing` (the `kademlia`
package's k-bucket table and its JSON form; `routing_file` keeps it in the data dir), `lan` (multicast beacons).
"""
