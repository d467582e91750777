"""The leader's answer to its followers' fetches (ReplicaFetch, codec/kafka07/replication.py),
in fetch sessions (docs/replication.md §5; the sessions themselves: replication/fetch_sessions.py).

A fetch is answered at once when it finds data or an error for one of its partitions, or when
it is a one-off fetch that may not wait; otherwise it is held until an append or a state
change of one of its session's partitions, or until its max wait runs out. Every pass records
the follower's position of the partitions it looks at (which moves the ISR and the high
watermark): those listed, those that changed here since the session's last answer, and those
whose follower is outside the ISR. A full fetch (a new session, or a sessionless one) answers
every partition; an incremental one only those with something new.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred

from twisted_broker.codec.kafka07.primitives import INT32
from twisted_broker.codec.kafka07.replication import (
    NEW_SESSION, SESSIONLESS, ReplicaFetchRequest, encode_replica_fetch_part_header,
)
from twisted_broker.codec.kafka07.responses import NO_ERROR, encode_response_header
from twisted_broker.errors import KafkaError
from twisted_broker.replication.fetch_sessions import FetchSession, SessionPartition
from twisted_broker.storage.segment import FileRegion


class ReplicaFetches:
    def __init__(self, manager, clock) -> None:
        self.manager = manager
        self.clock = clock

    def replica_fetch(self, request: ReplicaFetchRequest) -> list | Deferred:
        sessions = self.manager.fetch_sessions
        listed = {(p.topic, p.partition): SessionPartition(p.leader_epoch, p.offset, p.max_bytes, p.flushed_offset)
                  for p in request.partitions}
        full = request.session_epoch in (SESSIONLESS, NEW_SESSION)
        try:
            if full:
                session = sessions.open(request.replica_id, listed, registered=request.session_epoch == NEW_SESSION)
            else:
                session = sessions.find(request.replica_id, request.session_id, request.session_epoch)
                sessions.update(session, listed, request.forgotten)
        except KafkaError as exc:
            return [encode_response_header(exc.code, INT32.size) + INT32.pack(request.session_id)]
        if full:
            session.dirty.clear()
            keys = list(session.partitions)
        else:
            keys = list({**listed, **dict.fromkeys(session.take_dirty()), **dict.fromkeys(session.recheck)})
        pieces, found, told = self._pass(session, keys, full)
        if found or request.max_wait_ms <= 0:
            return self._answered(session, pieces, told)
        _close_regions(pieces)
        return self._hold(session, request, keys, full)

    def _hold(self, session: FetchSession, request: ReplicaFetchRequest, keys: list, full: bool) -> Deferred:
        """Wait for an append or a state change of one of the session's partitions, or the end
        of the max wait; then answer what is due (an idle session: nothing)."""
        sessions = self.manager.fetch_sessions
        looked_at = dict.fromkeys(keys)  # looked at again on every pass: what they found may be due

        def dropped(_waiting) -> None:
            if timer.active():
                timer.cancel()
            sessions.release(session)
            if not session.registered:
                sessions.close(session)

        waiting: Deferred = Deferred(dropped)

        def wake(timed_out: bool = False) -> None:
            if waiting.called:
                return
            if session.closed:  # replaced by a newer session of its follower: nobody reads this
                dropped(waiting)
                waiting.callback(self._answered(session, [], []))
                return
            looked_at.update(dict.fromkeys(session.take_dirty()))
            pieces, found, told = self._pass(session, list(looked_at) if not full else list(session.partitions), full)
            if not (found or timed_out):  # an append the follower does not read yet (flushed visibility)
                _close_regions(pieces)
                return
            dropped(waiting)
            waiting.callback(self._answered(session, pieces, told))

        timer = self.clock.callLater(request.max_wait_ms / 1000, wake, True)
        sessions.hold(session, wake)
        return waiting

    def _pass(self, session: FetchSession, keys: list, full: bool) -> tuple[list, bool, list]:
        """Record the follower's position of each of ``keys`` and read what it lacks: the
        answer's parts, whether one has data or an error, and what each part tells."""
        manager, replica_id = self.manager, session.replica_id
        pieces: list = []
        told: list = []
        found = False
        for key in keys:
            part = session.partitions.get(key)
            if part is None:  # forgotten
                continue
            topic, partition = key
            region = None
            try:
                replica = manager.follower_fetch(replica_id, topic, partition, part.leader_epoch, part.offset,
                                                 part.flushed_offset)
                leader = replica.leader
                if leader is not None and replica_id not in leader.isr:
                    session.recheck.add(key)
                else:
                    session.recheck.discard(key)
                log_ = replica.log
                region = log_.read_written(part.offset, part.max_bytes)
                length = region.length if region is not None else 0
                if region is not None and not length:
                    region.close()
                    region = None
                now = (log_.end_offset, log_.written_end)
                if not (full or length or now != part.told):
                    continue
                epochs = [(e.epoch, e.start_offset) for e in replica.epochs.entries_in(part.offset, part.offset + length)]
                header = encode_replica_fetch_part_header(topic, partition, NO_ERROR, *now, epochs, length)
            except KafkaError as exc:
                found = True  # an error is an answer: the follower must hear it now
                now = None
                session.recheck.discard(key)
                header = encode_replica_fetch_part_header(topic, partition, exc.code, -1, -1, [], 0)
            pieces.append(header)
            told.append((part, now))
            if region is not None:
                pieces.append(region)
                found = True
        # The positions recorded may have moved high watermarks: told in these parts already.
        for key in keys:
            session.dirty.pop(key, None)
        return pieces, found, told

    def _answered(self, session: FetchSession, pieces: list, told: list) -> list:
        for part, now in told:
            part.told = now
        if not session.registered:
            self.manager.fetch_sessions.close(session)
        total = INT32.size + sum(p.length if isinstance(p, FileRegion) else len(p) for p in pieces)
        return [encode_response_header(NO_ERROR, total) + INT32.pack(session.id), *pieces]


def _close_regions(pieces: list) -> None:
    for piece in pieces:
        if isinstance(piece, FileRegion):
            piece.close()
