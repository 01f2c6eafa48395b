"""A stand-in for `loop.call_later` (the linger timer of `swarm.service.swarm_service`): nothing waits for real time."""

from __future__ import annotations


class FakeTimers:
    """`call_later` records; `fire()` runs what is due, as the loop would."""

    class Handle:
        def __init__(self, delay, callback, args) -> None:
            self.delay, self.callback, self.args = delay, callback, args
            self.cancelled = False

        def cancel(self) -> None:
            self.cancelled = True

    def __init__(self) -> None:
        self.handles: list[FakeTimers.Handle] = []

    def call_later(self, delay, callback, *args):
        handle = self.Handle(delay, callback, args)
        self.handles.append(handle)
        return handle

    @property
    def pending(self) -> list[Handle]:
        return [h for h in self.handles if not h.cancelled]

    def fire(self) -> None:
        due, self.handles = self.pending, []
        for handle in due:
            handle.callback(*handle.args)
