"""The bytes that all Kafka connections together may buffer for partly received big requests.

A frame up to connection.py's ``SMALL_REQUEST_BYTES`` is buffered freely (at most that plus one
socket read per connection); a bigger one must first reserve its declared size here, and the
connection stops reading until it has. 0.7 allows 100 MB requests, so without it 1,000
connections each holding a partly sent one could pin 100 GB. A reserved frame that receives
nothing for ``STALLED_REQUEST_S`` closes its connection, so a few silent peers cannot hold the
budget and starve every big produce. The other bounds on a peer are listed in connection.py.
Reactor thread only.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol


class BudgetWaiter(Protocol):
    """A connection waiting for its reservation (connection.py's FramedConnection)."""

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
