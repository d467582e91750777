"""The bytes that all Kafka connections together may buffer for partly received big requests.

Why it exists and how connections use it: see the bounds listed in ``protocols/kafka.py``.
Reactor thread only.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol


class BudgetWaiter(Protocol):
    """A connection waiting for its reservation (KafkaServerProtocol)."""

    def budget_granted(self, size: int) -> None: ...


class RequestBudget:
    """Bytes that all connections together may buffer for partly received big requests.

    A connection reserves a big frame's whole declared size before reading its body, so
    every reservation can complete on its peer's bytes alone: no two connections wait on
    each other. Waiters are granted in arrival order; a frame larger than the whole budget
    is granted when nothing else is reserved. Reactor thread only.
    """

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.reserved_bytes = 0
        self._waiting: deque[tuple[BudgetWaiter, int]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _fits(self, size: int) -> bool:
        return self.reserved_bytes + size <= self.limit_bytes or self.reserved_bytes == 0

    def reserve(self, protocol: BudgetWaiter, size: int) -> bool:
        """Reserve ``size`` bytes now (True), or queue ``protocol`` to be granted them later."""
        if not self._waiting and self._fits(size):
            self.reserved_bytes += size
            return True
        self._waiting.append((protocol, size))
        return False

    def release(self, size: int) -> None:
        self.reserved_bytes -= size
        while self._waiting and self._fits(self._waiting[0][1]):
            protocol, size = self._waiting.popleft()
            self.reserved_bytes += size
            protocol.budget_granted(size)

    def cancel(self, protocol: BudgetWaiter) -> None:
        """Forget a waiting connection (it went away)."""
        self._waiting = deque(entry for entry in self._waiting if entry[0] is not protocol)
