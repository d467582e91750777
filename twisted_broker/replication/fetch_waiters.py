"""Followers' fetches held on a leader until one of their partitions has something new
(handlers/kafka07/replication_requests.py holds them; the replica manager says what changed).

A held fetch waits on each partition it asks for, and an append wakes only the fetches waiting
on that partition, once per reactor step: with a thousand partitions, an append to one of them
no longer makes every held fetch re-read every partition it carries (issue 23: that capped
acks=all produce at about a hundred partitions a second).

``changes`` counts everything that can change a held fetch's answer without an append (a high
watermark moved, a role changed): a fetch whose wait ran out with no change since it was held
is answered with what it found then, instead of reading every partition again (issue 23: that
second pass was half of an idle broker's cost).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

Key = tuple[str, int]
Wake = Callable[[], object]


class FetchWaiters:
    def __init__(self, clock) -> None:
        self._clock = clock
        self._waiting: dict[Key, dict[Wake, None]] = {}  # an ordered set per partition
        self._appended: set[Key] = set()
        self._call = None  # the pending call that wakes them
        self.changes = 0

    def hold(self, keys: Iterable[Key], wake: Wake) -> None:
        """Call ``wake`` after the next append to one of ``keys`` (then it waits on none of them)."""
        for key in keys:
            self._waiting.setdefault(key, {})[wake] = None

    def drop(self, keys: Iterable[Key], wake: Wake) -> None:
        for key in keys:
            waiting = self._waiting.get(key)
            if waiting is not None:
                waiting.pop(wake, None)
                if not waiting:
                    del self._waiting[key]

    def appended(self, key: Key) -> None:
        self.changes += 1
        if key in self._waiting:
            self._appended.add(key)
            # After this reactor step, not inside each append: one answer to a waiting
            # follower then carries everything the step appended.
            if self._call is None:
                self._call = self._clock.callLater(0, self._wake)

    def changed(self) -> None:
        self.changes += 1

    def waiting(self, key: Key) -> int:
        """How many fetches wait on the partition."""
        return len(self._waiting.get(key, ()))

    def _wake(self) -> None:
        self._call = None
        keys, self._appended = self._appended, set()
        woken: dict[Wake, None] = {}
        for key in keys:
            woken.update(self._waiting.pop(key, {}))
        for wake in woken:
            wake()


__all__ = ["FetchWaiters"]
