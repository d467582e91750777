"""The leader-epoch cache of one replica's log, and the truncation rule it serves
(docs/replication.md §3, Leader epoch; Kafka's KIP-101 and KIP-279). Pure: the caller reads
and writes ``leader-epoch-checkpoint`` with ``encode``/``decode``.

How this works
--------------
0.7 messages carry no leader epoch, so each replica records, beside its log, the byte offset
at which each epoch's leader started writing: ``(epoch, start_offset)`` entries, epochs and
starts both increasing. A leader adds ``(its epoch, its log end)`` on taking office; a follower
copies the entries the leader sends with each fetched range, so caches agree where logs agree.

A follower that starts following (after a restart, or deposed) must cut whatever it holds that
the leader does not. It asks the leader where its own latest epoch ``E`` ends; the leader
answers with the largest epoch ``E' <= E`` it knows and where that ends on the leader
(``end_offset_for``). If the follower also knows ``E'``, the logs agree up to
``min(leader's end of E', follower's end of E')``: cut there. If it does not (its epoch
before ``E'`` is some ``F < E'``), it asks again for ``F``; the asked epoch falls every round,
so this ends. A leader whose every epoch is newer than ``E`` answers ``E`` and where its first
epoch starts (Kafka's answer): a leader that lost its whole log and leads a new epoch answers
``(E, 0)``, and the follower cuts everything. Cutting at the checkpointed high watermark instead is what lost committed data
in Kafka before 0.11: a high watermark checkpoint lags the log, and two failures in a row
could truncate a message every in-sync replica had stored.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from dataclasses import dataclass

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


@dataclass(frozen=True)
class EpochEntry:
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """The ``(epoch, start_offset)`` entries of one log, oldest first."""

    def __init__(self, entries: list[EpochEntry] | None = None) -> None:
        self._entries: list[EpochEntry] = []
        for entry in entries or ():
            self.assign(entry.epoch, entry.start_offset)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` wrote from ``start_offset``; False if that is known already.

        Entries that conflict with the new one (an epoch as new or newer, or a start at or
        after its start) are dropped first, as Kafka's cache does: the new entry describes the
        log as it is now, and an entry past it can only come from a log that has since lost
        its tail (a crash within a flush interval) or been cut. Raising instead wedged the
        broker: ``become_leader`` could never take office again."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"epoch {epoch} at {start_offset}: both must be >= 0")
        if self._entries:
            last = self._entries[-1]
            if epoch == last.epoch and start_offset >= last.start_offset:
                return False
            while self._entries and (self._entries[-1].epoch >= epoch or self._entries[-1].start_offset >= start_offset):
                dropped = self._entries.pop()
                if dropped.start_offset > start_offset or dropped.epoch > epoch:
                    log.warning("leader epoch %d at %d replaces epoch %d at %d, which the log no longer holds",
                                epoch, start_offset, dropped.epoch, dropped.start_offset)
        self._entries.append(EpochEntry(epoch, start_offset))
        return True

    def cut_to_log_end(self, log_end: int) -> bool:
        """A log opened (recovered) at ``log_end``: forget epochs that start past it. After a
        crash the epoch file can be ahead of the log (it is written at once, the log's tail
        only on flush). True if anything was cut."""
        before = len(self._entries)
        while self._entries and self._entries[-1].start_offset > log_end:
            self._entries.pop()
        return len(self._entries) != before

    def end_offset_for(self, epoch: int, log_end: int) -> tuple[int, int]:
        """``(E', end)``: the largest known epoch ``E' <= epoch`` and the offset where it ends
        (the next epoch's start, or ``log_end`` for the latest). When every known epoch is
        newer than ``epoch``, ``(epoch, the first known epoch's start)``: nothing of ``epoch``
        or older is here past that start (Kafka's LeaderEpochFileCache.endOffsetFor; a leader
        restarted with its whole log lost holds only its own new epoch, and answering
        "unknown" made a follower keep what its high watermark covered, which that leader
        never had). ``(UNDEFINED_EPOCH, UNDEFINED_OFFSET)`` when no epoch is known, or for
        ``UNDEFINED_EPOCH``."""
        if epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        index = bisect_right([e.epoch for e in self._entries], epoch) - 1
        if index < 0:
            return epoch, self._entries[0].start_offset
        end = self._entries[index + 1].start_offset if index + 1 < len(self._entries) else log_end
        return self._entries[index].epoch, end

    def truncate_from_end(self, offset: int) -> None:
        """The log was cut at ``offset``: forget the epochs that started at or after it."""
        while self._entries and self._entries[-1].start_offset >= offset:
            self._entries.pop()

    def truncate_from_start(self, offset: int) -> None:
        """Retention deleted everything before ``offset``: the epoch covering it now starts there."""
        index = bisect_right([e.start_offset for e in self._entries], offset) - 1
        if index < 0:
            return
        del self._entries[:index]
        if self._entries[0].start_offset < offset:
            self._entries[0] = EpochEntry(self._entries[0].epoch, offset)

    def entries_in(self, start: int, end: int) -> list[EpochEntry]:
        """The entries a fetch of ``[start, end)`` carries: the epoch covering ``start`` and
        every epoch that starts inside the range."""
        result = [e for e in self._entries if start < e.start_offset < end]
        covering = bisect_right([e.start_offset for e in self._entries], start) - 1
        if covering >= 0:
            result.insert(0, self._entries[covering])
        return result

    def encode(self) -> bytes:
        """``leader-epoch-checkpoint``: a version line, a count line, then ``epoch offset`` lines
        (Kafka's file format)."""
        lines = ["0", str(len(self._entries)), *(f"{e.epoch} {e.start_offset}" for e in self._entries)]
        return ("\n".join(lines) + "\n").encode()

    @classmethod
    def decode(cls, data: bytes) -> LeaderEpochCache:
        """Raises ValueError for a file that is not a version-0 checkpoint or whose entries
        are out of order."""
        lines = data.decode("ascii").splitlines()
        if len(lines) < 2 or lines[0] != "0" or not lines[1].isdigit() or int(lines[1]) != len(lines) - 2:
            raise ValueError("not a version 0 leader-epoch-checkpoint")
        entries: list[EpochEntry] = []
        for line in lines[2:]:
            fields = line.split()
            if len(fields) != 2 or not all(f.isdigit() for f in fields):
                raise ValueError(f"bad leader-epoch-checkpoint line {line!r}")
            entry = EpochEntry(int(fields[0]), int(fields[1]))
            if entries and (entry.epoch <= entries[-1].epoch or entry.start_offset < entries[-1].start_offset):
                raise ValueError(f"leader-epoch-checkpoint entries out of order at {line!r}")
            entries.append(entry)
        return cls(entries)


@dataclass(frozen=True)
class Truncation:
    """The follower's next step: ask the leader about ``ask_epoch`` again, or cut at ``offset``."""

    offset: int | None = None
    ask_epoch: int | None = None


def first_question(cache: LeaderEpochCache, *, log_end: int, high_watermark: int) -> Truncation:
    """What a follower that starts following does first: ask about its latest epoch, or, with
    no epoch recorded, cut at its high watermark (then nothing past it was ever committed by a
    leader this follower knew, and a log without epochs holds nothing replicated past it)."""
    if cache.latest_epoch == UNDEFINED_EPOCH:
        return Truncation(offset=min(high_watermark, log_end))
    return Truncation(ask_epoch=cache.latest_epoch)


def follower_truncation(cache: LeaderEpochCache, *, log_end: int, high_watermark: int,
                        leader_epoch: int, leader_end_offset: int) -> Truncation:
    """The follower's step after the leader answered ``(leader_epoch, leader_end_offset)`` to
    ``end_offset_for``. See the module docstring."""
    if leader_epoch == UNDEFINED_EPOCH:
        # The leader knows no epoch at all (its cache is empty): fall back to the high
        # watermark, the one point both are known to share.
        return Truncation(offset=min(high_watermark, log_end))
    # Every epoch this follower holds newer than the leader's answer: end_offset_for answers
    # the leader's epoch and this follower's first start (it shares at most what precedes it).
    own_epoch, own_end = cache.end_offset_for(leader_epoch, log_end)
    if own_epoch == leader_epoch:
        return Truncation(offset=min(leader_end_offset, own_end, log_end))
    if own_epoch == UNDEFINED_EPOCH:
        # No epoch here (first_question does not ask then): nothing shared past the leader's end.
        return Truncation(offset=min(leader_end_offset, log_end))
    return Truncation(ask_epoch=own_epoch)
