"""A compact string notation for picker scenarios, so that test tables read like the state they describe.

A scenario is a few lines:

    a: 1101          source `a` has blocks 0, 1 and 3 (one digit per block)
    b: *             source `b` has every block (a seed); the name `origin` means `picker.ORIGIN`
    state: v.r..     one char per block: . missing  r requested  g received  v verified  x failed
    pick a 2 -> 3 1  pick(a, 2) must return [3, 1]; "-> -" means nothing
    have b 2         b announced block 2
    recv b 3 -> a    a copy of 3 arrived from b; the losers to cancel are [a] ("-" for none)
    verify 3         the block passed its hash (an optional "-> a b" checks the requests to cancel)
    fail 3           the block failed its hash
    abort a 3        a's request for 3 is withdrawn (an optional "-> yes/no": did it become pickable)
    lost a -> 3      a vanished; the blocks that became pickable again
    start 2          the delivery point (client position) moves to block 2
    states -> v.rg.  the states now
    avail -> 2110    availability per block now (digits)

Blocks shown as `r`, `g` or `x` in a `state:` row were requested by a hidden source `~` that has every block
(a seed does not change availability counts), so they are "requested from someone else".
"""

from __future__ import annotations

from typing import Any

from swarm.core.picker import ORIGIN, BlockState, Picker

STATE_CHARS = {
    ".": BlockState.MISSING,
    "r": BlockState.REQUESTED,
    "g": BlockState.RECEIVED,
    "v": BlockState.VERIFIED,
    "x": BlockState.FAILED,
}
CHAR_OF_STATE = {state: char for char, state in STATE_CHARS.items()}

#: the hidden source that holds the requests a `state:` row implies
OTHER = "~"


def source_id(name: str) -> Any:
    return ORIGIN if name == "origin" else name


def source_name(source: Any) -> str:
    return "origin" if source is ORIGIN else str(source)


def parse_states(text: str) -> list[BlockState]:
    return [STATE_CHARS[char] for char in text]


def render_states(picker: Picker) -> str:
    return "".join(CHAR_OF_STATE[state] for state in picker.states())


def render_availability(picker: Picker) -> str:
    return "".join(str(picker.availability(block)) for block in range(picker.num_blocks))


def parse_blocks(text: str) -> list[int]:
    text = text.strip()
    return [] if text in ("", "-") else [int(token) for token in text.split()]


def parse_names(text: str) -> list[Any]:
    text = text.strip()
    return [] if text in ("", "-") else [source_id(token) for token in text.split()]


def set_states(picker: Picker, states: str) -> None:
    """Drive `picker` into `states` through its public API (requests come from the hidden seed `~`)."""
    if any(char in "rgx" for char in states) and OTHER not in picker.sources():
        picker.add_source(OTHER, has_all=True)
    for block, char in enumerate(states):
        if char in "rgx":
            picker.mark_requested(OTHER, block)
        if char in "gx":
            picker.on_received(OTHER, block)
        if char == "x":
            picker.on_failed(block)
        if char == "v":
            picker.on_verified(block)


def build(scenario: str, **picker_kwargs: Any) -> tuple[Picker, list[str]]:
    """Build a picker from the source and `state:` rows of `scenario`; returns it and the remaining lines."""
    lines = [line.strip() for line in scenario.strip().splitlines() if line.strip()]
    sources: list[tuple[str, str]] = []
    states: str | None = None
    commands: list[str] = []
    for line in lines:
        head, colon, rest = line.partition(":")
        if colon and " " not in head:
            if head == "state":
                states = rest.strip()
            else:
                sources.append((head, rest.strip()))
        else:
            commands.append(line)
    if states is None:
        raise ValueError("scenario needs a 'state:' row")
    picker = Picker(len(states), **picker_kwargs)
    for name, bits in sources:
        if bits == "*":
            picker.add_source(source_id(name), has_all=True)
        else:
            if len(bits) != len(states):
                raise ValueError(f"row {name!r} has {len(bits)} blocks, state has {len(states)}")
            picker.add_source(source_id(name), [bit == "1" for bit in bits])
    set_states(picker, states)
    return picker, commands


def run(picker: Picker, commands: list[str]) -> None:
    """Apply each command to `picker`, asserting every expectation given after "->"."""
    for line in commands:
        action, arrow, expected = line.partition("->")
        words = action.split()
        verb, args = words[0], words[1:]
        where = f"in {line!r} (states {render_states(picker)})"
        if verb == "pick":
            got: Any = picker.pick(source_id(args[0]), int(args[1]))
            want: Any = parse_blocks(expected)
        elif verb == "have":
            got, want = picker.have(source_id(args[0]), int(args[1])), None
        elif verb == "recv":
            got, want = picker.on_received(source_id(args[0]), int(args[1])), parse_names(expected)
        elif verb == "verify":
            got, want = picker.on_verified(int(args[0])), parse_names(expected)
        elif verb == "fail":
            got, want = picker.on_failed(int(args[0])), None
        elif verb == "abort":
            got = picker.abort(source_id(args[0]), int(args[1]))
            want = {"yes": True, "no": False}.get(expected.strip())
        elif verb == "lost":
            got, want = picker.remove_source(source_id(args[0])), parse_blocks(expected)
        elif verb == "start":
            got, want = picker.set_delivery_point(int(args[0])), None
        elif verb == "states":
            got, want = render_states(picker), expected.strip()
        elif verb == "avail":
            got, want = render_availability(picker), expected.strip()
        else:
            raise ValueError(f"unknown verb {verb!r} in {line!r}")
        if arrow:
            assert got == want, f"{where}: got {got!r}, expected {want!r}"
