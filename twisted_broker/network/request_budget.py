"""The bytes that all Kafka connections together may buffer for partly received big requests.

A frame up to ``SMALL_REQUEST_BYTES`` is buffered freely (at most that plus one
socket read per connection); a bigger one must first reserve its declared size here, and the
connection stops reading until it has. 0.7 allows 100 MB requests, so without it 1,000
connections each holding a partly sent one could pin 100 GB. A reserved frame that receives
nothing for ``STALLED_REQUEST_S`` closes its connection, so a few silent peers cannot hold the
budget and starve every big produce. The other bounds on a peer are listed in connection.py,
whose connections take their side of the budget from ``BudgetedFrames``. Reactor thread only.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

# Requests up to this size (fetches, offsets, most produces) never wait for the budget.
SMALL_REQUEST_BYTES = 64 * 1024
STALLED_REQUEST_S = 30.0


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


class BudgetedFrames:
    """The connection's side of the budget (a mixin of connection.py's FramedConnection, whose
    ``_decoder``, ``_budget``, ``_clock``, ``_paused``, ``_refuse`` and transport it uses)."""

    def _budget_partial_frame(self, completed: bool) -> None:
        """Account for the frame still being received after a read; stop reading if it must wait."""
        if completed:
            self._release_reservation()  # the reserved frame is complete (and queued or served)
            if self._awaiting_budget:  # completed without waiting (a transport that kept reading)
                self._awaiting_budget = False
                self._budget.cancel(self)
        elif self._reserved_bytes:
            if self._stall_timer is not None:
                self._stall_timer.reset(STALLED_REQUEST_S)
            return
        if self._awaiting_budget:
            return
        size = self._decoder.next_frame_size()
        if size is None or size <= SMALL_REQUEST_BYTES:
            return
        if self._budget.reserve(self, size):
            self._reserved(size)
        else:
            self._awaiting_budget = True
            self.transport.pauseProducing()

    def budget_granted(self, size: int) -> None:
        """The budget grants a waiting reservation: read on."""
        self._awaiting_budget = False
        if self._closing:
            self._budget.release(size)
            return
        self._reserved(size)
        if not self._paused:
            self.transport.resumeProducing()

    def _reserved(self, size: int) -> None:
        self._reserved_bytes = size
        if self._clock is not None:
            self._stall_timer = self._clock.callLater(STALLED_REQUEST_S, self._stalled)

    def _release_reservation(self) -> None:
        if self._stall_timer is not None:
            if self._stall_timer.active():
                self._stall_timer.cancel()
            self._stall_timer = None
        if self._reserved_bytes:
            size, self._reserved_bytes = self._reserved_bytes, 0
            self._budget.release(size)

    def _stalled(self) -> None:
        self._stall_timer = None
        self._refuse(f"no bytes for {STALLED_REQUEST_S:.0f} s in the middle of a "
                     f"{self._reserved_bytes}-byte request")
        self._release_reservation()
