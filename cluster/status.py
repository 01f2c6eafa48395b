"""`swarmproxy cluster status`: per transfer, per location, progress, rates, representants, ETA,
PENDING/FINISHED/REFUSED.

`snapshot(coord)` reads redis into plain dicts (what `--json` prints); `render(snapshot)` draws them for people.
"""

from __future__ import annotations

from typing import Any

from cluster.coord import Coord
from cluster.overlay import Level, Member, View
from cluster.records import FINISHED, REFUSED
from cluster.run import manifest_of

__all__ = ["render", "snapshot"]

BAR = 24  # characters of a progress bar


async def snapshot(coord: Coord) -> dict:
    agents = await coord.agents()
    transfers = await coord.transfers()
    cancelled = await coord.cancelled(transfers)
    out: dict[str, Any] = {"agents": {n: {"host": a.host, "port": a.port, "dc": a.dc, "rack": a.rack, "name": a.name}
                      for n, a in agents.items()}, "transfers": []}
    for tid, transfer in sorted(transfers.items(), key=lambda item: item[1].sort_key()):
        manifest, _layer = manifest_of(transfer)
        members = await coord.members(tid)
        view = View.of(Member(n, None if m.seeder or n not in agents else agents[n].location, m.progress, m.seeder)
                       for n, m in members.items() if m.seeder or n in agents)
        holders = await coord.holders(tid, view.slots())
        view.holders = holders
        places: dict[str, dict[str, Any]] = {}
        for node, member in members.items():
            if member.seeder:
                continue
            agent = agents.get(node)
            place = str(agent.location) if agent else "(gone)"
            entry = places.setdefault(place, {"members": 0, "finished": 0, "verified": 0, "blocks": 0,
                                              "rate": 0.0, "representants": [], "pending": [], "done": [],
                                              "refused": []})
            entry["members"] += 1
            entry["verified"] += member.verified
            entry["blocks"] += member.blocks
            entry["rate"] += member.rate
            name = agent.name if agent else node[:12]
            if member.state == REFUSED:
                entry["refused"].append(f"{name} ({member.reason})")
            else:
                (entry["done"] if member.state == FINISHED else entry["pending"]).append(name)
            entry["finished"] += member.state == FINISHED
            if view.is_rack_rep(node):
                entry["representants"].append(name + (" (dc)" if view.is_dc_rep(node) else ""))
        left = sum((e["blocks"] - e["verified"]) for e in places.values()) * manifest.block_size
        rate = sum(e["rate"] for e in places.values())
        received = {level.label: sum(m.received.get(level.label, 0) for m in members.values()) for level in Level}
        out["transfers"].append({
            "id": tid, "name": transfer.name, "root": manifest.root.hex(), "size": manifest.size,
            "priority": transfer.priority, "hosts": transfer.hosts, "cancelled": tid in cancelled,
            "members": len([m for m in members.values() if not m.seeder]),
            "finished": sum(1 for m in members.values() if m.state == FINISHED and not m.seeder),
            "rate": rate, "eta_s": (left / rate) if rate > 0 and left else (0.0 if not left else None),
            "received_by_level": received, "locations": dict(sorted(places.items())),
        })
    return out


def _bar(fraction: float) -> str:
    filled = int(round(fraction * BAR))
    return "[" + "#" * filled + "." * (BAR - filled) + "]"


def _rate(value: float) -> str:
    return f"{value / 1e6:7.1f} MB/s"


def render(snap: dict) -> str:
    lines = [f"{len(snap['agents'])} agent(s) alive"]
    if not snap["transfers"]:
        lines.append("no transfers")
    for t in snap["transfers"]:
        state = "cancelled" if t["cancelled"] else f"{t['finished']}/{t['members']} finished"
        eta = "" if t["eta_s"] is None else f", ETA {t['eta_s']:.0f} s"
        lines.append(f"\ntransfer {t['id']}  {t['name']}  {t['size']} bytes  priority {t['priority']}  "
                     f"{state}  {_rate(t['rate']).strip()}{eta}")
        for place, e in t["locations"].items():
            fraction = e["verified"] / e["blocks"] if e["blocks"] else 0.0
            lines.append(f"  {place:<20} {_bar(fraction)} {fraction:6.1%} {_rate(e['rate'])}  "
                         f"{e['finished']}/{e['members']} FINISHED")
            if e["representants"]:
                lines.append(f"      representants: {', '.join(sorted(e['representants']))}")
            if e["pending"]:
                lines.append(f"      PENDING: {', '.join(sorted(e['pending']))}")
            if e["refused"]:
                lines.append(f"      REFUSED: {'; '.join(sorted(e['refused']))}")
    return "\n".join(lines)
