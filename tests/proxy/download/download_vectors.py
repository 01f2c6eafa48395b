"""A driver for table-driven tests of `proxy.download.core`: vectors of (event, time, expected actions).

A vector is a list of steps; each step feeds one event to a `DownloadCore` at a fake time (plain floats) and names
the exact actions expected back, as compact signatures (see `sig`). The driver plays the shell (`fallback`):
origin bytes come from the origin's content at the origin's own offset (reset by every origin head), swarm bytes
from the swarm's content from `StartSwarm.start` on, and it checks on every step that the vector is one the shell
could produce (no event for a wait the shell does not have, no event later than the core's deadline) and that the
core never leaves the shell waiting for nothing. After the last step it checks the invariants every download has:
the bytes delivered are exactly the representation's `start..end` (a prefix of it when cut), never twice, never a
gap; `Account` and `HandOver` at most once; nothing delivered after `Finish`/`Cut`; every event after done is [].
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from types import SimpleNamespace

from proxy.download import actions as act
from proxy.download.core import DownloadCore
from proxy.download.discovery_rule import DiscoveryRule
from proxy.download.settings import DownloadSettings
from proxy.download.transition import TransitionSettings
from proxy.origin_head import OriginHead
from swarm.content.manifest import build_manifest
from swarm.trust import ManifestSource

BLOCK = 16 * 1024
SIZE = 100_000
V1 = '"v1"'


def content(size: int, seed: bytes) -> bytes:
    out, counter = bytearray(), 0
    while len(out) < size:
        out += hashlib.sha256(seed + counter.to_bytes(8, "big")).digest()
        counter += 1
    return bytes(out[:size])


CONTENT = content(SIZE, b"v1")
BAD = content(SIZE, b"not the origin's")  # a manifest whose bytes differ from the origin's
V2 = content(60_000, b"v2")  # the origin's next version
MANIFEST, _ = build_manifest([CONTENT], SIZE, block_size=BLOCK, validator=V1, content_type="text/html")
EMPTY_MANIFEST, _ = build_manifest([], 0, block_size=BLOCK, validator=V1)
PUBLISHED = SimpleNamespace(block_size=BLOCK)  # the origin's own manifest, as OriginHead.published

# T = 1 s, R = 10 000 B/s, W = 2 s (R·W = 20 000 bytes), early lookup 0.5 s; the R vectors turn the early lookup off.
TRANSITION = TransitionSettings(first_byte_timeout=1.0, min_rate=10_000.0, rate_window=2.0, early_lookup=0.5)
# Every size counts as large here: these vectors are about the mechanics; the privacy rule's own vectors
# (tests/proxy/download/test_privacy.py) use the default threshold.
SETTINGS = DownloadSettings(TRANSITION, max_spool=1 << 20, sharing=True, repoll=(1.0, 2.0),
                            discovery=DiscoveryRule(large=0))
NO_EARLY = dataclasses.replace(SETTINGS, transition=dataclasses.replace(TRANSITION, early_lookup=0.0))


@dataclasses.dataclass(frozen=True)
class Found:
    manifest: object
    source: ManifestSource = ManifestSource.SELF
    providers: tuple = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "source", ManifestSource(self.source))  # as `proxy.engine.Found` does


FOUND = Found(MANIFEST)


def head(status: int = 200, *, size: int | None = SIZE, start: int = 0, end: int | None = None,
         validator: str | None = V1, swarmable: bool = True, reason: str | None = None, ranges: bool = False,
         published=None, hinted: bool = False, content_type: str | None = "text/html",
         content_encoding: str | None = None, head_size: int = 100) -> OriginHead:
    return OriginHead(status=status, swarmable=swarmable, reason=reason, size=size, validator=validator, start=start,
                      end=size if end is None else end, content_type=content_type,
                      content_encoding=content_encoding, ranges=ranges, published=published, hinted=hinted,
                      head_size=head_size)


H200 = head()


# -- steps: (event, argument, time, expected signatures) ----------------------------------------------------------

def HEAD(h, t, exp=""):  # noqa: N802 - the origin's GET answered with head `h`
    return ("head", h, t, exp)


def HFAIL(t, exp="", err="refused"):  # noqa: N802 - the origin's GET failed before its head
    return ("hfail", err, t, exp)


def O(n, t, exp):  # noqa: E743,N802 - the origin's next `n` body bytes
    return ("o", n, t, exp)


def OEND(t, exp):  # noqa: N802
    return ("oend", None, t, exp)


def OFAIL(t, exp):  # noqa: N802
    return ("ofail", "reset", t, exp)


def ANSWER(h, exp=""):  # noqa: N802 - the racing HEAD answered (None: it failed)
    return ("answer", h, None, exp)


def LOOK(found, t, exp, others=None, ahead=0):  # noqa: N802 - the lookup answered (`others` fetching it)
    return ("look", found if others is None else (found, others, ahead), t, exp)


def S(n, t, exp):  # noqa: N802 - the swarm's next `n` bytes (None: to the end of its current block)
    return ("s", n, t, exp)


def SEND(t, exp):  # noqa: N802
    return ("send", None, t, exp)


def SFAIL(t, exp):  # noqa: N802
    return ("sfail", "boom", t, exp)


def BLOCKS(start, stop, t):  # noqa: N802 - whole swarm blocks start..stop, each delivered in full
    return [S(None, t, f"D(s,{min(BLOCK, stop - at)})") for at in range(start, stop, BLOCK)]


def TIMER(exp, t="deadline"):  # noqa: N802 - the timer, by default at exactly next_deadline()
    return ("timer", None, t, exp)


def DEADLINE(value):  # noqa: N802 - next_deadline() is exactly `value`
    return ("deadline", value, None, "")


def ABORT(exp=""):  # noqa: N802 - the shell leaves (always done last, as `finally` does)
    return ("abort", None, None, exp)


@dataclasses.dataclass
class Vector:
    steps: list
    settings: DownloadSettings = SETTINGS
    range_header: str | None = None
    if_range: str | None = None
    origin: bytes = CONTENT  # what the origin serves
    swarm: bytes = CONTENT  # what the manifest's blocks hold
    ends: str = "Finish"  # "Finish", "Cut", "gone" (the client left: abort) or "none" (RelayAsIs, Fail, 416)


def vector(*steps, **fields) -> Vector:
    """A vector of `steps`, each a step or a list of them (a stretch several vectors share)."""
    flat: list = []
    for step in steps:
        flat.extend(step if isinstance(step, list) else [step])
    return Vector(flat, **fields)


def sig(a) -> str:  # noqa: C901 - one arm per action
    match a:
        case act.Respond(status, start, end, _, described):
            extra = "" if described is None else f",{described[0]}|{described[1]}"
            return f"Respond({status},{start}-{end}{extra})"
        case act.OpenSpool(size, block_size):
            return f"OpenSpool({size},{block_size})"
        case act.StartLookup(headless):
            return "StartLookup(headless)" if headless else "StartLookup"
        case act.Switch(cause, position, _):
            return f"Switch({cause}@{position})"
        case act.StartSwarm(_, start, end):
            return f"StartSwarm({start}-{end})"
        case act.StartSegments(start, end, block_size, _):
            return f"StartSegments({start}-{end},{block_size})"
        case act.ReopenOrigin(start, end, validator, streams):
            return f"ReopenOrigin({start}-{end},{validator}{f',x{streams}' if streams > 1 else ''})"
        case act.Deliver(source, data):
            return f"D({source.value[0]},{len(data)})"
        case act.RejectManifest(source):
            return f"RejectManifest({source})"
        case act.SwarmFailed(text):
            return f"SwarmFailed({text.split(':')[0]})"
        case act.OriginComplete(publishable):
            return f"OriginComplete({publishable})"
        case act.Account(from_swarm):
            return f"Account({from_swarm})"
        case act.HandOver(_, fetch_start, swarm_done, publishable):
            return f"HandOver({fetch_start},{'done' if swarm_done else 'partial'},{publishable})"
        case act.Cut(reason):
            assert reason.startswith("origin_cut: "), reason
            return "Cut(neither)" if "neither the origin nor the swarm" in reason else \
                "Cut(broke_off)" if "broke off" in reason else f"Cut({reason})"
        case act.Fail(error):
            return f"Fail({error})"
    return type(a).__name__


class Driver:
    """Plays the shell around one core; `run()` feeds the vector's steps and checks everything."""

    on_time = True  # False: an event may come after the core's deadline (the shell's loop was busy)

    def __init__(self, vector: Vector) -> None:
        self.v = vector
        self.core = DownloadCore(vector.settings, range_header=vector.range_header, if_range=vector.if_range)
        self.log: list[tuple[str, object]] = []  # (step kind, action), every action in order
        self.origin = "head"  # the shell's origin wait: "head" (its head is due), "body", or None (closed)
        self.origin_at = 0
        self.lookup = self.head_request = False
        self.found = None
        self.swarm_at: int | None = None
        self.swarm_end = 0
        self.slice: tuple[bytes, int, int] | None = None  # (representation, start, end) the client was promised
        self.last_head: OriginHead | None = None
        self.now = 0.0

    def run(self) -> DownloadCore:
        assert self.core.start(0.0) == []
        steps = list(self.v.steps)
        if not steps or steps[-1][0] != "abort":
            steps.append(ABORT())
        for number, step in enumerate(steps):
            if step[0] == "abort":
                self.check_after_done()
            actions = self.feed(*step[:3])
            got = [sig(a) for a in actions]
            assert got == step[3].split(), f"step {number} {step[:3]!r}: got {' '.join(got)!r}"
            for a in actions:
                self.apply(step[0], a)
            self.check_waits(number)
        assert self.core.done
        assert self.core.abort() == [] and self.probe(self.core) == {}
        self.check_log()
        return self.core

    # -- one step -------------------------------------------------------------------------------------------------

    def feed(self, kind: str, arg, t):  # noqa: C901 - one arm per event
        core = self.core
        if kind == "deadline":
            assert core.next_deadline() == arg
            return []
        if kind == "abort":
            return core.abort()
        if t == "deadline":
            t = core.next_deadline()
            assert t is not None, "a timer step but the core has no deadline"
        elif kind != "timer":
            deadline = core.next_deadline()
            if t is not None and self.on_time:  # vectors fire the timer first when its deadline passes
                assert deadline is None or t <= deadline, f"{kind} at {t} after the deadline {deadline}"
        if t is not None:
            assert t >= self.now, "time runs backwards"
            self.now = t
        if kind == "timer":
            deadline = core.next_deadline()
            assert deadline is not None and t >= deadline, "the shell fires the timer only at its deadline"
            return core.timer(t)
        if kind in ("head", "hfail", "o", "oend", "ofail"):
            assert core.wants_origin and self.origin == ("head" if kind in ("head", "hfail") else "body"), \
                f"the shell does not wait for the origin's {kind} here"
            if kind == "head":
                self.origin, self.origin_at, self.last_head = "body", arg.start, arg
                return core.origin_head(arg, t)
            if kind == "hfail":
                self.origin = None
                return core.origin_head_failed(arg, t)
            if kind == "o":
                data = self.v.origin[self.origin_at:self.origin_at + arg]
                assert data, "the origin has no more bytes"
                self.origin_at += len(data)
                return core.origin_data(data, t)
            self.origin = None
            return core.origin_end(t) if kind == "oend" else core.origin_failed(arg, t)
        if kind == "answer":
            assert self.head_request, "no HEAD is running"
            self.head_request = False
            return core.head_answered(arg)
        if kind == "look":
            assert self.lookup, "no lookup is running"
            self.lookup = False
            found, others, ahead = arg if isinstance(arg, tuple) else (arg, 0, 0)
            if found is not None:
                self.found = found
            return core.lookup_done(found, t, others, ahead)
        assert core.wants_swarm and self.swarm_at is not None, "the shell does not read the swarm here"
        if kind == "s":
            n = arg if arg is not None else BLOCK - self.swarm_at % BLOCK
            end = min(self.swarm_at + n, self.swarm_end)
            data, self.swarm_at = self.v.swarm[self.swarm_at:end], end
            assert data, "the swarm has no more bytes"
            return core.swarm_data(data, t)
        self.swarm_at = None
        return core.swarm_end(t) if kind == "send" else core.swarm_failed(arg, t)

    def apply(self, kind: str, a) -> None:  # noqa: C901 - what the shell does with each action
        self.log.append((kind, a))
        match a:
            case act.RelayHead():
                h = self.last_head
                self.slice = (self.v.origin, h.start, h.end)
            case act.Respond(status, start, end, manifest, _):
                assert manifest is self.found.manifest
                self.slice = (self.v.swarm, start, end) if status != 416 else None
            case act.StartLookup():
                assert not self.lookup, "a second lookup while one runs"
                self.lookup = True
            case act.StopLookup():
                assert self.lookup, "StopLookup without a lookup"
                self.lookup = False
            case act.StartHead():
                self.head_request = True
            case act.StopHead():
                assert self.head_request, "StopHead without a HEAD"
                self.head_request = False
            case act.StartSwarm(found, start, end):
                assert found is self.found and start % BLOCK == 0 and self.swarm_at is None
                self.swarm_at, self.swarm_end = start, end
            case act.StartSegments(start, end):
                assert self.swarm_at is None
                self.swarm_at, self.swarm_end = start, end
            case act.StopSwarm():
                self.swarm_at = None
            case act.CloseOrigin():
                self.origin = None
            case act.ReopenOrigin():
                assert self.origin is None
                self.origin = "head"

    def check_waits(self, number: int) -> None:
        """What the shell's `_step` would wait for: something, unless the core is done."""
        core = self.core
        if core.done:
            return
        waits = [core.wants_origin and self.origin is not None, core.wants_swarm and self.swarm_at is not None,
                 self.lookup, self.head_request, core.next_deadline() is not None]
        assert any(waits), f"after step {number} the core waits for nothing in phase {core.phase.value}"

    # -- after the last step --------------------------------------------------------------------------------------

    def probe(self, core: DownloadCore) -> dict:
        """Every event fed to a core that is done: what did not return []."""
        t = self.now + 100.0
        events = {
            "origin_head": lambda: core.origin_head(H200, t), "origin_head_failed": lambda: core.origin_head_failed(
                "x", t), "origin_data": lambda: core.origin_data(b"x" * 10, t), "origin_end": lambda: core.origin_end(
                t), "origin_failed": lambda: core.origin_failed("x", t), "head_answered": lambda: core.head_answered(
                H200), "lookup_done": lambda: core.lookup_done(FOUND, t), "swarm_data": lambda: core.swarm_data(
                CONTENT[:BLOCK], t), "swarm_end": lambda: core.swarm_end(t), "swarm_failed": lambda: core.swarm_failed(
                "x", t), "timer": lambda: core.timer(t)}
        return {name: got for name, event in events.items() if (got := event())}

    def check_after_done(self) -> None:
        if self.core.done:  # on a copy: the probes must not change what abort() does
            assert self.probe(copy.deepcopy(self.core)) == {}, "events after done returned actions"

    def check_log(self) -> None:
        actions = [a for _, a in self.log]
        names = [type(a).__name__ for a in actions]
        delivered = b"".join(a.data for a in actions if isinstance(a, act.Deliver))
        assert all(a.data for a in actions if isinstance(a, act.Deliver)), "an empty Deliver"
        heads = [n for n in names if n in ("RelayHead", "Respond", "RelayAsIs", "Fail")]
        assert len(heads) == 1 or (self.v.ends == "gone" and not heads), f"one answer to the client, got {heads}"
        assert names.count("Account") <= 1 and names.count("HandOver") <= 1
        ends = [i for i, n in enumerate(names) if n in ("Finish", "Cut")]
        assert len(ends) <= 1
        if ends:
            assert not any(n == "Deliver" for n in names[ends[0]:]), "a Deliver after Finish/Cut"
            assert all(kind == "abort" for kind, _ in self.log[ends[0] + 1:]), "actions after the end"
        if "StartSwarm" in names or "StartSegments" in names:  # the fetch is stopped, counted, handed over, once
            i = names.index("HandOver")
            assert names[i - 2:i] == ["StopSwarm", "Account"]
            assert actions[i].manifest is (self.found.manifest if "StartSwarm" in names else None)
            if "Finish" in names:
                assert i < max(j for j, n in enumerate(names) if n == "Deliver")
        else:
            assert "HandOver" not in names and "Account" not in names
        assert (names[ends[0]] if ends else "none") == self.v.ends.replace("gone", "none"), f"ended with {names}"
        if self.v.ends == "none" or self.slice is None:
            assert delivered == b""
            return
        representation, start, end = self.slice
        expected = representation[start:end]
        if self.v.ends == "Finish":
            assert delivered == expected, "the client did not get exactly the representation's bytes"
        else:
            assert len(delivered) < len(expected) and delivered == expected[:len(delivered)]
