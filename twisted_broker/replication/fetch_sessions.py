"""The leader's fetch sessions: what each follower's one fetch holds, and what changed since
its last answer (docs/replication.md §5, fetch sessions; Kafka's KIP-227).

A follower fetches every partition it follows here in one ReplicaFetch. The session keeps
what it last listed for each partition (leader epoch, offset, flushed offset) and what the
leader last told it (high watermark, log end), so that an incremental fetch lists only the
partitions whose follower end moved, and its answer carries only those with something new.
The replica manager calls ``changed`` for every partition event (an append, a high
watermark's move, a state change); a session marks that partition dirty, and an append or a
state change wakes its held fetch after the reactor step: one answer then carries everything
the step appended. An idle round touches no partition at all.

One session per follower broker: a follower has one connection per leader, and a new session
(epoch 0) replaces the old one, whose held fetch, if any, is woken to answer empty.
Sessionless fetches (epoch -1) get a session of their own, never registered under the
follower, gone once answered.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from twisted_broker.codec.kafka07.replication_errors import FetchSessionIdNotFound, InvalidFetchSessionEpoch

Key = tuple[str, int]


@dataclass(slots=True)
class SessionPartition:
    """What the follower last listed for a partition, and what it was last told."""

    leader_epoch: int
    offset: int
    max_bytes: int
    flushed_offset: int
    told: tuple[int, int] | None = None  # (high watermark, log end) of the last answer; None: not yet


class FetchSession:
    def __init__(self, session_id: int, replica_id: int, registered: bool) -> None:
        self.id = session_id
        self.replica_id = replica_id
        self.registered = registered  # False: a sessionless fetch's, gone once answered
        self.next_epoch = 1
        self.partitions: dict[Key, SessionPartition] = {}
        self.dirty: dict[Key, None] = {}  # changed on the leader since the last answer (an ordered set)
        # Partitions whose follower is outside the ISR: recorded at every fetch, so it can join.
        self.recheck: set[Key] = set()
        self.last_fetch_ms = 0
        self.closed = False  # replaced by a newer session of its follower
        self.wake: Callable[[], object] | None = None  # its held fetch

    def take_dirty(self) -> list[Key]:
        keys, self.dirty = list(self.dirty), {}
        return keys


class FetchSessions:
    def __init__(self, clock) -> None:
        self._clock = clock
        self._ids = itertools.count(1)
        self._by_replica: dict[int, FetchSession] = {}
        self._by_key: dict[Key, dict[FetchSession, None]] = {}
        self._woken: dict[FetchSession, None] = {}
        self._call = None  # the pending call that wakes them

    # -- a fetch arrives --------------------------------------------------------------------

    def open(self, replica_id: int, parts: dict[Key, SessionPartition], *, registered: bool = True) -> FetchSession:
        """A new session of ``parts`` (a full fetch); a registered one replaces the follower's
        previous session."""
        session = FetchSession(next(self._ids) if registered else 0, replica_id, registered)
        if registered:
            old = self._by_replica.get(replica_id)
            if old is not None:
                self.close(old)
            self._by_replica[replica_id] = session
        self.update(session, parts, ())
        session.next_epoch = 1
        return session

    def find(self, replica_id: int, session_id: int, epoch: int) -> FetchSession:
        """The follower's session, if ``epoch`` is its next. Raises FetchSessionIdNotFound or
        InvalidFetchSessionEpoch."""
        session = self._by_replica.get(replica_id)
        if session is None or session.id != session_id:
            raise FetchSessionIdNotFound(f"broker {replica_id} has no fetch session {session_id} here")
        if epoch != session.next_epoch:
            raise InvalidFetchSessionEpoch(f"fetch session {session_id} of broker {replica_id} expects epoch "
                                           f"{session.next_epoch}, not {epoch}")
        return session

    def update(self, session: FetchSession, parts: dict[Key, SessionPartition], forgotten: Iterable[Key]) -> None:
        """Partitions listed (added, or their follower's end moved) and forgotten."""
        session.next_epoch += 1
        session.last_fetch_ms = int(self._clock.seconds() * 1000)
        for key in forgotten:
            if session.partitions.pop(key, None) is not None:
                session.dirty.pop(key, None)
                session.recheck.discard(key)
                sessions = self._by_key.get(key)
                if sessions is not None:
                    sessions.pop(session, None)
                    if not sessions:
                        del self._by_key[key]
        for key, part in parts.items():
            old = session.partitions.get(key)
            if old is not None and old.leader_epoch == part.leader_epoch:
                part.told = old.told
            session.partitions[key] = part
            self._by_key.setdefault(key, {})[session] = None

    def close(self, session: FetchSession) -> None:
        """The session ends (replaced, or a sessionless fetch answered): its held fetch, if
        any, is woken to answer empty."""
        session.closed = True
        if self._by_replica.get(session.replica_id) is session:
            del self._by_replica[session.replica_id]
        for key in session.partitions:
            sessions = self._by_key.get(key)
            if sessions is not None:
                sessions.pop(session, None)
                if not sessions:
                    del self._by_key[key]
        if session.wake is not None:
            self._schedule(session)

    def session_of(self, replica_id: int) -> FetchSession | None:
        return self._by_replica.get(replica_id)

    def last_fetches(self, key: Key, followers: Iterable[int]) -> Iterator[tuple[int, int]]:
        """``(follower, its last fetch time in ms)`` for each of ``followers`` whose session
        holds ``key``: it fetched then at the end the session holds (an incremental fetch
        lists only the partitions whose end moved), as the leader's lag check counts it."""
        for follower in followers:
            session = self._by_replica.get(follower)
            if session is not None and key in session.partitions:
                yield follower, session.last_fetch_ms

    # -- held fetches -----------------------------------------------------------------------

    def hold(self, session: FetchSession, wake: Callable[[], object]) -> None:
        """Call ``wake`` after the next append or state change of one of the session's partitions."""
        session.wake = wake

    def release(self, session: FetchSession) -> None:
        session.wake = None
        self._woken.pop(session, None)

    def waiting(self, key: Key) -> int:
        """How many held fetches wait on the partition."""
        return sum(1 for s in self._by_key.get(key, ()) if s.wake is not None)

    # -- what changed on the leader -----------------------------------------------------------

    def changed(self, key: Key, *, wake: bool = True) -> None:
        """Something a follower of ``key`` must hear of: an append or a state change (``wake``
        its held fetch), or a high watermark's move (told with the next answer)."""
        sessions = self._by_key.get(key)
        if not sessions:
            return
        for session in sessions:
            session.dirty[key] = None
            if wake and session.wake is not None:
                self._schedule(session)

    def _schedule(self, session: FetchSession) -> None:
        self._woken[session] = None
        # After this reactor step, not inside each append: one answer to a waiting follower
        # then carries everything the step appended.
        if self._call is None:
            self._call = self._clock.callLater(0, self._wake)

    def _wake(self) -> None:
        self._call = None
        woken, self._woken = self._woken, {}
        for session in woken:
            if session.wake is not None:
                session.wake()


__all__ = ["FetchSession", "FetchSessions", "SessionPartition"]
