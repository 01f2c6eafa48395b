"""`BtSession`: the node's one embedded libtorrent session, as an asyncio shell.

libtorrent runs its own threads; this shell starts the session with the pinned settings (`bittorrent.settings`),
waits until it listens (or says why it cannot), has its alerts read (`bittorrent.watcher`, a thread that also
enforces the listener's admission, `bittorrent.admission`), adds and removes torrents, and counts what went up
and down. Everything BitTorrent goes through it, so the Internet mode can turn on the same session's
DHT rather than start a second one.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libtorrent as lt

import addresses
from addresses import LOWEST_PORT  # (the one rule for ports a stranger names: none below it is dialled)
from swarm.content.manifest import Manifest
from swarm.content.torrent import Torrent

from .admission import Admission
from .download import Download
from .errors import AlreadyAdded, ListenFailed
from .lookups import Heard, Lookups
from .port_maps import PortMaps
from .settings import MAX_CONNECTIONS, dht_read_only, session_settings
from .watcher import AlertWatcher

__all__ = ["BtSession", "Seeding"]

log = logging.getLogger("swarmproxy.bittorrent")

LOOKUP_POLL = 0.1  # seconds between two asks for the DHT's stats while a lookup may not be over
LISTEN_TIMEOUT = 5.0  # seconds to wait for libtorrent to say it listens (it binds on its own thread)
# Sessions started on port 0 before one gives up: libtorrent binds TCP to a port the kernel picks, then UDP (uTP, the
# DHT) to the same number, which another process's UDP socket may hold ("Address already in use": seen when two
# test workers started sessions at once). A fresh session gets a fresh TCP port; a port the user chose is not retried.
LISTEN_ATTEMPTS = 4
# Removals are status; accepted connections are peer, handshakes and disconnections connect.
ALERTS = (lt.alert_category.error | lt.alert_category.status | lt.alert_category.storage | lt.alert_category.peer
          | lt.alert_category.connect)


@dataclass
class Seeding:
    """One torrent the session seeds."""

    torrent: Torrent
    manifest: Manifest
    handle: Any  # lt.torrent_handle


class BtSession:
    """The embedded session; `await start()`, then `seed` / `remove`; `await stop()`."""

    def __init__(self, host: str, port: int, *, reachable: Iterable[str] = (),
                 dht_nodes: tuple[str, ...] | None = None, state_file: Path | None = None,
                 port_mapping: bool = False) -> None:
        """`reachable`: non-public networks (CIDR) peers may be on, in and out (`--share-private-origins`'
        addresses); every other non-public address is filtered (`bittorrent.watcher`). `dht_nodes`: the Mainline
        DHT on, joined through these `host:port`s (`bittorrent.settings.bootstrap_routers` gives the public
        network's, where allowed); None: off. `state_file`: where the DHT's node id and routing table are kept
        between runs (read at start, written at stop), so a restart rejoins through the nodes it knew.
        `port_mapping`: ask the router for port mappings (`bittorrent.settings.may_map_ports`)."""
        self.host, self.requested_port = host, port
        self.reachable = tuple(reachable)
        self._reachable_networks = [ipaddress.ip_network(net, strict=False) for net in self.reachable]
        self.dht_nodes = dht_nodes
        self.state_file = state_file if dht_nodes is not None else None
        self.port_mapping = port_mapping
        self.port_maps = PortMaps()
        # Told (protocol, external port or None, why not) when the router answers for a port we asked it to map.
        self.on_port_map: Callable[[str, int | None, str | None], None] = lambda protocol, external, why: None
        self.dht_node_count: int | None = None  # nodes in the routing table, as the last DHT stats said
        self.dht_read_only: bool | None = None  # BEP 43, as last set (`bittorrent.settings.dht_read_only`)
        self._counting: list[asyncio.Future[int]] = []  # `dht_nodes_now` callers waiting for the next count
        self._lookups = Lookups()  # the DHT lookups under way, and who listens to each
        self._polling: asyncio.Task | None = None  # asks for DHT stats while a lookup may not be over
        self.session: Any = None  # lt.session once started
        self.port: int | None = None  # the TCP port it listens on, once it does
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listening: asyncio.Future[int] | None = None
        self._watcher: AlertWatcher | None = None
        self.admission = Admission(MAX_CONNECTIONS)
        self.uploaded = self.downloaded = 0  # payload bytes of torrents removed so far (live ones: `status`)
        # v2 info-hash -> the removals waiting for libtorrent to say it removed that torrent (one alert answers all)
        self._removing: dict[bytes, list[asyncio.Future[None]]] = {}
        # Told (info-hash, why) when libtorrent cannot read a torrent's file: the seeder ends that torrent.
        self.on_failure: Callable[[bytes, str], None] = lambda info_hash, why: None
        self.errors = 0
        self.downloads: dict[bytes, Download] = {}  # v2 info-hash -> a torrent being downloaded

    @property
    def address(self) -> tuple[str, int] | None:
        return (self.host, self.port) if self.port is not None else None

    async def start(self) -> tuple[str, int]:
        for _ in range(LISTEN_ATTEMPTS - 1 if self.requested_port == 0 else 0):
            try:
                return await self._start_once()
            except ListenFailed as error:
                if error.timed_out:
                    raise
                log.info("BitTorrent: %s; trying another port", error)
        return await self._start_once()

    async def _start_once(self) -> tuple[str, int]:
        self._loop = asyncio.get_running_loop()
        self._listening = self._loop.create_future()
        mask = ALERTS
        if self.dht_nodes is not None:  # lookups' answers, and the routing table's size for the status
            mask |= lt.alert_category.dht_operation | lt.alert_category.stats
        if self.port_mapping:
            mask |= lt.alert_category.port_mapping
        routers = None if self.dht_nodes is None else tuple(node for node in self.dht_nodes if _address(node) is None)
        settings = session_settings(self.host, self.requested_port, alert_mask=int(mask), dht_routers=routers,
                                    port_mapping=self.port_mapping)
        # The DHT starts once the session listens (below): started before its socket is open, libtorrent makes
        # its node without the saved table (a fresh id, no nodes to start from).
        settings["enable_dht"] = False
        params = await asyncio.to_thread(_read_state, self.state_file) if self.state_file is not None else None
        if params is not None:
            params.settings = settings
        self.session = lt.session(params if params is not None else settings)
        self._watcher = AlertWatcher(self.session, self._loop, self._on_alerts, self.admission,
                                     reachable=self.reachable)
        self._watcher.start()
        try:
            async with asyncio.timeout(LISTEN_TIMEOUT):
                self.port = await self._listening
        except TimeoutError:
            await self.stop()
            raise ListenFailed(f"libtorrent did not listen on {self.host}:{self.requested_port} "
                               f"within {LISTEN_TIMEOUT:g} s", timed_out=True) from None
        except ListenFailed:
            await self.stop()
            raise
        if self.dht_nodes is not None:
            # Read-only from its first query where it will be (set after, its first queries made others take the
            # node into their tables, whose later queries it then left unanswered: 15 s stalls on the test internet)
            self._judge_read_only()
            self.session.apply_settings({"enable_dht": True})
        # A node by address is told directly, once the DHT runs (told before, it is lost; given as a router, it is
        # never taken into the routing table).
        for node in self.dht_nodes or ():
            if (address := _address(node)) is not None:
                self.session.add_dht_node(address)
        return (self.host, self.port)

    def seed(self, torrent: Torrent, manifest: Manifest, directory: Path, file_name: str) -> Seeding:
        """Seed `torrent` from `directory / file_name`, which holds the whole content, every block of it verified
        by the store (on write, and again on load): libtorrent is told so (every piece had and verified, no
        hashing pass at start; `seed_mode`, which hashes each piece on its first read, and `upload_mode` both cost
        throughput in bench/bt_seed.py). A torrent that has every piece requests none, so libtorrent never writes
        to the file (it opens a finished torrent's files read-only)."""
        params = lt.add_torrent_params()
        params.ti = lt.torrent_info(torrent.data)
        params.save_path = str(directory)
        params.renamed_files = {0: file_name}
        pieces = params.ti.num_pieces()
        params.have_pieces = [True] * pieces
        params.verified_pieces = [True] * pieces
        params.flags &= ~(lt.torrent_flags.auto_managed | lt.torrent_flags.paused)
        params.flags |= lt.torrent_flags.duplicate_is_error  # never another's handle back (a download's)
        return Seeding(torrent, manifest, self.session.add_torrent(params))

    def download(self, info_hash: bytes, staging: Path, *, torrent: bytes | None = None, name: str = "",
                 peers: list[tuple[str, int]] | None = None) -> Download:
        """Start downloading the torrent of v2 `info_hash` into `staging` (libtorrent's own copy, deleted with it):
        from `torrent` (a .torrent file's bytes, already checked by `bittorrent.target`) or, without, a magnet
        whose info dict comes from the peers. Nothing is fetched until asked (`Download`'s docstring): every piece
        starts at priority 0. Trackers and web seeds the file names are dropped; no PEX or LSD. With the Mainline DHT
        on (the Internet mode), libtorrent looks the info-hash up there and announces it, as any BitTorrent client
        does for what it downloads."""
        if (known := self.downloads.get(info_hash)) is not None:  # asked twice at once: one torrent, two users
            known.users += 1
            known.connect(peers or [])
            return known
        params = lt.add_torrent_params()
        info = None
        if torrent is not None:
            params.ti = info = lt.torrent_info(torrent)
            params.piece_priorities = [0] * info.num_pieces()
        else:
            params.info_hashes = lt.info_hash_t(lt.sha256_hash(info_hash))
            params.name = name or info_hash.hex()
        staging.mkdir(parents=True, exist_ok=True)
        params.save_path = str(staging)
        params.trackers, params.url_seeds = [], []
        flags = lt.torrent_flags
        # duplicate_is_error: a torrent this session seeds under that info-hash is an error, not its handle back
        params.flags |= (flags.disable_pex | flags.disable_lsd | flags.override_trackers | flags.override_web_seeds
                         | flags.duplicate_is_error)
        params.flags &= ~(flags.auto_managed | flags.paused)
        try:
            handle = self.session.add_torrent(params)
        except RuntimeError as exc:
            raise AlreadyAdded(f"this node seeds the torrent {info_hash.hex()[:16]}… already ({exc})") from None
        download = self.downloads[info_hash] = Download(info_hash, handle, staging)
        if info is not None:
            download.metadata.set_result(bytes(info.info_section()))
        download.connect(peers or [])
        return download

    async def end_download(self, download: Download) -> None:
        """Its user is done with it: once the last one is, remove it and delete libtorrent's staging copy (the
        verified bytes are in the store by now)."""
        download.users -= 1
        if download.users > 0:
            return
        if self.downloads.get(download.info_hash) is download:
            del self.downloads[download.info_hash]
        if self.session is not None:
            removed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._removing.setdefault(download.info_hash, []).append(removed)
            try:
                self.session.remove_torrent(download.handle, lt.session.delete_files)
            except RuntimeError:
                removed.set_result(None)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(LISTEN_TIMEOUT):
                    await removed
        await asyncio.to_thread(download.discard_staging)

    # -- the Mainline DHT (only with `dht_nodes`) -------------------------------------------------------------------

    def dht_announce(self, key: bytes, port: int) -> None:
        """Announce this node at `port` under the 20-byte `key` (BEP 5 `announce_peer`: the storing nodes keep the
        address they see us at, about 30 minutes; nothing withdraws it)."""
        if self.session is not None:
            self.session.dht_announce(lt.sha1_hash(key), port, 0)

    def dht_lookup(self, key: bytes) -> Heard:
        """Start a lookup of the 20-byte `key` (BEP 5 `get_peers`): the addresses announced there come on the queue
        as nodes answer with some, a batch per answer, then None once the DHT says no lookup is under way
        (`bittorrent.lookups`: with others at once, that is once the last ends). The caller caps its wait, and calls
        `dht_lookup_over` when it stops listening."""
        heard = self._lookups.start(key)
        if self.session is not None:
            self.session.dht_get_peers(lt.sha1_hash(key))
            if self._polling is None:
                self._polling = asyncio.ensure_future(self._poll_lookups())
        return heard

    async def _poll_lookups(self) -> None:
        try:
            while self.session is not None and self._lookups.waiting:
                self.post_dht_stats()
                await asyncio.sleep(LOOKUP_POLL)
        finally:
            self._polling = None

    def post_dht_stats(self) -> None:
        """Ask libtorrent for the DHT's stats (answered by an alert: the routing table's size, the lookups under
        way); every request goes through here, so that the answers can be matched to them in order."""
        if self.session is not None and self.dht_nodes is not None:
            self.session.post_dht_stats()
            self._lookups.stats_asked()

    def may_dial(self, host: str, port: int) -> bool:
        """Whether an address a DHT node gave (a stranger's word) may be dialled: a public one, or one in a network
        the user listed (`reachable`), and never a privileged port. libtorrent's IP filter guards its own
        connections; the addresses a lookup hands us go to our peer transport, which has no filter of its own."""
        ip = addresses.parse(host)
        if ip is None or not LOWEST_PORT <= port < 65536:
            return False
        return addresses.is_public(host) or any(ip in network for network in self._reachable_networks)

    def dht_lookup_over(self, key: bytes, heard: Heard) -> None:
        self._lookups.over(key, heard)

    def _judge_read_only(self) -> None:
        """Make our DHT node read-only while it is behind a NAT that maps nothing (`settings.dht_read_only`), and
        answer queries again once the router maps the port or the DHT says our address is this machine's."""
        if self.session is None or self.dht_nodes is None:
            return
        read_only = dht_read_only(self.host, self.dht_nodes, mapped=self.port_maps.listener_mapped("udp"),
                                  external_is_ours=_is_ours(self.port_maps.external_address))
        if read_only != self.dht_read_only:
            self.dht_read_only = read_only
            self.session.apply_settings({"dht_read_only": read_only})
            log.info("Mainline DHT: %s", "read-only (BEP 43): behind a NAT that maps nothing, it answers no query"
                     if read_only else "answering queries (reachable, or a DHT of our own LAN)")

    def dht_status(self) -> dict[str, object]:
        if self.session is None or self.dht_nodes is None:
            return {"on": False}
        self.post_dht_stats()  # answered by an alert: the count shown is the one asked for last time
        return {"on": True, "lookups": len(self._lookups), "nodes": self.dht_node_count,
                "read_only": self.dht_read_only}

    async def dht_nodes_now(self) -> int:
        """The nodes in the DHT's routing table, as libtorrent answers now."""
        assert self._loop is not None and self.session is not None and self.dht_nodes is not None
        counted: asyncio.Future[int] = self._loop.create_future()
        self._counting.append(counted)
        self.post_dht_stats()
        return await counted

    # -- port mapping (only with `port_mapping`) -------------------------------------------------------------------

    def map_port(self, port: int) -> None:
        """Ask the router to map our `port` over TCP and UDP (the peer port: TCP, and QUIC over UDP). What it says
        comes as alerts, into `port_maps`."""
        if self.session is None or not self.port_mapping:
            return
        for protocol, name in ((lt.portmap_protocol.tcp, "tcp"), (lt.portmap_protocol.udp, "udp")):
            for index in self.session.add_port_mapping(protocol, port, port):
                self.port_maps.asked(int(index), name, port)

    def nat_status(self) -> dict[str, object]:
        return {"port_mapping": self.port_mapping, "external_address": self.port_maps.external_address,
                "mappings": self.port_maps.status()}

    async def save_state(self) -> None:
        """Write the DHT's node id and routing table to `state_file` (atomically); a failure is logged."""
        if self.session is None or self.state_file is None:
            return
        flags = lt.save_state_flags_t.save_dht_state
        data = lt.write_session_params_buf(self.session.session_state(flags), flags)
        try:
            await asyncio.to_thread(_write_atomically, self.state_file, bytes(data))
        except OSError as exc:
            log.warning("BitTorrent: cannot save the DHT's table to %s: %s", self.state_file, exc.strerror or exc)

    def stop_reading(self, seeding: Seeding) -> None:
        """Remove it now, from any thread (libtorrent's calls are; nothing of the loop's is touched): its file is
        about to be deleted. `remove` does the bookkeeping later, on the loop."""
        with contextlib.suppress(RuntimeError):  # removed already
            if self.session is not None:
                self.session.remove_torrent(seeding.handle)

    def remove(self, seeding: Seeding) -> asyncio.Future[None]:
        """Stop seeding it; the future is done once libtorrent has removed it (it reads nothing for it after
        that), or at once when the session is gone. Its file stays."""
        assert self._loop is not None or self.session is None
        removed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        try:
            status = seeding.handle.status()
            self.uploaded += status.total_payload_upload
            self.downloaded += status.total_payload_download
            self.session.remove_torrent(seeding.handle)
        except (RuntimeError, AttributeError):  # an invalid handle (removed), or no session: nothing reads it
            removed.set_result(None)
        else:
            self._removing.setdefault(seeding.torrent.info_hash, []).append(removed)
        return removed

    def status(self, seeding: list[Seeding]) -> dict[str, object]:
        """What the admin API shows: the address, the torrents seeded, their peers, bytes up and down."""
        peers = up = down = 0
        for one in seeding:
            with contextlib.suppress(RuntimeError):
                status = one.handle.status()
                peers += status.num_peers
                up += status.total_payload_upload
                down += status.total_payload_download
        address = self.address
        return {"listen": f"{address[0]}:{address[1]}" if address else None, "torrents": len(seeding),
                "peers": peers, "uploaded_bytes": self.uploaded + up, "downloaded_bytes": self.downloaded + down,
                "errors": self.errors, "downloading": len(self.downloads),
                **(self._watcher.status() if self._watcher is not None
                   else {"admission": self.admission.status(), "bans": 0, "banned": []})}

    async def stop(self) -> None:
        if self.session is None:
            return
        await self.save_state()
        self.session.pause()
        watcher, self._watcher = self._watcher, None
        held, self.session, self._loop = [self.session], None, None
        if watcher is not None:  # joined, and dropped: the destructor below is the session's last owner
            await asyncio.to_thread(watcher.stop)
            del watcher
        await asyncio.to_thread(_close, held)  # the destructor joins libtorrent's threads: not on the loop
        self._lookups.clear()
        for download in self.downloads.values():
            download.on_failure("the BitTorrent session stopped")
        self.downloads.clear()
        for waiting in self._removing.values():  # the session is gone: nothing reads any torrent's file now
            for removed in waiting:
                if not removed.done():
                    removed.set_result(None)
        self._removing.clear()

    def _on_alerts(self, alerts: list[Any]) -> None:
        """The alerts that are not about one connection (`AlertWatcher` handles those), on the loop."""
        if self.session is None:
            return
        for alert in alerts:
            try:
                self._on_alert(alert)
            except Exception:  # one bad alert must not stop the reading of all later ones
                log.exception("BitTorrent: cannot handle %s", type(alert).__name__)

    def _download_of(self, alert: Any) -> Download | None:
        info_hash = _info_hash(alert)
        return self.downloads.get(info_hash) if info_hash is not None else None

    def _on_alert(self, alert: Any) -> None:
        if isinstance(alert, lt.listen_succeeded_alert):
            if alert.socket_type == lt.socket_type_t.tcp and self._listening and not self._listening.done():
                self._listening.set_result(alert.port)
        elif isinstance(alert, lt.listen_failed_alert):
            if self._listening is not None and not self._listening.done():
                self._listening.set_exception(ListenFailed(
                    f"cannot listen for BitTorrent peers on {self.host}:{self.requested_port}: "
                    f"{alert.error.message()}"))
        elif isinstance(alert, lt.torrent_removed_alert):
            for removed in self._removing.pop(alert.info_hashes.v2.to_bytes(), []):
                if not removed.done():
                    removed.set_result(None)
        elif isinstance(alert, lt.dht_get_peers_reply_alert):
            peers = [(str(host), int(port)) for host, port in alert.peers() if self.may_dial(str(host), int(port))]
            self._lookups.on_peers(alert.info_hash.to_bytes(), peers)
        elif isinstance(alert, lt.dht_stats_alert):
            self.dht_node_count = sum(int(bucket["num_nodes"]) for bucket in alert.routing_table)
            self._lookups.on_stats(any(lookup["type"] == "get_peers" for lookup in alert.active_requests))
            counting, self._counting = self._counting, []
            for counted in counting:
                if not counted.done():
                    counted.set_result(self.dht_node_count)
        elif isinstance(alert, lt.portmap_alert):
            mapping = self.port_maps.mapped(int(alert.mapping), _transport(alert), _protocol(alert),
                                            int(alert.external_port))
            log.info("router: port %s/%s mapped to %d (%s)", mapping.port or "BitTorrent", mapping.protocol,
                     alert.external_port, _transport(alert))
            if mapping.port is not None:
                self.on_port_map(mapping.protocol, int(alert.external_port), None)
            else:
                self._judge_read_only()
        elif isinstance(alert, lt.portmap_error_alert):
            mapping = self.port_maps.failed(int(alert.mapping), _transport(alert), alert.error.message())
            log.info("router: port %s not mapped by %s: %s", mapping.port or "BitTorrent", _transport(alert),
                     alert.error.message())
            if mapping.port is not None and not mapping.external:
                self.on_port_map(mapping.protocol, None, f"{_transport(alert)}: {alert.error.message()}")
            elif mapping.port is None:
                self._judge_read_only()
        elif isinstance(alert, lt.external_ip_alert):
            self.port_maps.external_address = str(alert.external_address)
            self._judge_read_only()
        elif isinstance(alert, lt.read_piece_alert):
            if (download := self._download_of(alert)) is not None:
                failed = alert.error.value() != 0
                download.on_piece(alert.piece, None if failed else bytes(alert.buffer), alert.error.message())
        elif isinstance(alert, lt.metadata_received_alert):
            if (download := self._download_of(alert)) is not None:
                download.on_metadata()
        elif isinstance(alert, lt.hash_failed_alert):
            if (download := self._download_of(alert)) is not None:
                download.on_hash_failed(alert.piece_index)
        elif isinstance(alert, lt.torrent_finished_alert):
            if (download := self._download_of(alert)) is not None:
                download.on_finished()
        elif isinstance(alert, (lt.file_error_alert, lt.torrent_error_alert)):
            self.errors += 1
            log.warning("BitTorrent: %s", alert.message())
            if (download := self._download_of(alert)) is not None:
                download.on_failure(alert.message())
                return
            with contextlib.suppress(RuntimeError):
                self.on_failure(alert.handle.info_hashes().v2.to_bytes(), alert.message())
        elif alert.category() & lt.alert_category.error:
            self.errors += 1
            log.warning("BitTorrent: %s", alert.message())


def _is_ours(host: str | None) -> bool:
    """Whether `host` is an address of this machine (it can be bound to): no NAT between us and who saw it."""
    ip = addresses.parse(host)
    if ip is None:
        return False
    try:
        with socket.socket(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind((str(ip), 0))
    except OSError:
        return False
    return True


def _address(node: str) -> tuple[str, int] | None:
    """`host:port` (`[v6]:port`) as an address when its host is an IP literal; None for a name (a router)."""
    host, _, port = node.rpartition(":")
    host = host.strip("[]")
    return (host, int(port)) if addresses.parse(host) is not None and port.isdigit() else None


def _transport(alert: Any) -> str:
    return "natpmp" if alert.map_transport == lt.portmap_transport.natpmp else "upnp"


def _protocol(alert: Any) -> str:
    return "udp" if alert.map_protocol == lt.portmap_protocol.udp else "tcp"


def _read_state(path: Path) -> Any:
    """The session params saved in `path` (only the DHT's state is read), or None when there are none to read: a
    missing or broken file starts a fresh table (logged), never a failure to start."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("BitTorrent: cannot read the DHT's saved table %s: %s", path, exc.strerror or exc)
        return None
    try:
        return lt.read_session_params(data, lt.save_state_flags_t.save_dht_state)
    except RuntimeError as exc:  # not bencoded
        log.warning("BitTorrent: the DHT's saved table %s is unreadable (%s): starting a fresh one", path, exc)
        return None


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    partial.replace(path)


def _info_hash(alert: Any) -> bytes | None:
    try:
        return bytes(alert.handle.info_hashes().v2.to_bytes())
    except RuntimeError:  # the torrent is gone
        return None


def _close(held: list[Any]) -> None:
    held.pop()  # the last reference: libtorrent shuts down and joins its threads here, in this thread
