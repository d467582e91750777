"""Groups of Kafka clients for the console: their partitions' modern ends and their members.

Such a group commits at 0.7's paths but modern offsets, so its lag is ``modern end -
committed``, as Kafka's clients count it (client/modern_lookup.py says why 0.7's
latest offset would not do). The ends and the members are asked of the brokers' modern
listeners (ListOffsets from each leader; FindCoordinator, then DescribeGroups) with
codec/kafka's codecs. ModernLookup blocks, so each question runs in the reactor's thread pool
on connections of its own, closed when it is answered: a page or a lag round asks once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from twisted.internet.threads import deferToThreadPool

from twisted_broker.client.modern_lookup import Address, GroupMembers, ModernLookup

TIMEOUT_S = 5.0


class ModernGroups:
    """Modern ends and members through the listeners ``listeners()`` names (the registry's)."""

    def __init__(self, reactor, listeners: Callable[[], list[Address]], *, timeout_s: float = TIMEOUT_S) -> None:
        self._reactor = reactor
        self._listeners = listeners
        self._timeout_s = timeout_s

    async def ends(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
        """``{(topic, modern partition): modern end}``; None where it cannot be known."""
        wanted = list(partitions)
        if not wanted:
            return {}
        return await self._in_thread(lambda lookup: lookup.latest(wanted))

    async def members(self, group: str) -> GroupMembers | None:
        """The group's state and members; None if no coordinator answers."""
        return await self._in_thread(lambda lookup: lookup.members(group))

    def _in_thread(self, question: Callable[[ModernLookup], object]):
        bootstrap = self._listeners()

        def ask():
            with ModernLookup(bootstrap, timeout_s=self._timeout_s) as lookup:
                return question(lookup)
        return deferToThreadPool(self._reactor, self._reactor.getThreadPool(), ask)
