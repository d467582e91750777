"""A partition's leader: its followers' positions, the in-sync set and the high watermark
(docs/replication.md §3). Pure: the caller feeds events with ``now_ms`` and carries out the
decisions (write the proposed ISR to ZooKeeper by compare-and-set, wake held fetches).

The rules, in the order ``follower_fetched``, ``tick`` and ``broker_gone`` apply them:

=================================================  ===========================================
event                                              decision
=================================================  ===========================================
a follower fetches from ``o``                      its end is ``o``; caught up now if ``o`` >=
                                                   the leader's end, or caught up at its last
                                                   fetch if ``o`` >= the leader's end then
a follower's fetch session fetched at ``t``        caught up at ``t`` if its end (unchanged:
without listing the partition                      not listed) >= the leader's end
a follower outside the ISR reaches ``HW`` and      propose ISR + follower
the current epoch's start
an ISR follower not caught up for more than        propose ISR - follower
``lag_time_max_ms``; or its broker is gone;
or it fetches from below the HW (it restarted
and lost what it had not flushed)
a proposal written                                 ISR = proposal; HW recomputed
a proposal refused (ZooKeeper version moved)       the caller re-reads the state; no proposal
                                                   is pending any more
the leader's session suspended or lost, or a       fenced: every write refused, HW frozen
newer epoch seen
=================================================  ===========================================

``HW = min(end of every ISR member)`` (the leader's own end included), never lower than
before. While a proposal is being written, the HW counts the members of both the current and
the proposed ISR (Kafka's "maximal ISR", KIP-497): a follower proposed in at the HW of the
moment must not find the HW moved past it by the time the write lands, or the ISR would name
a replica that lacks committed messages. A follower that has not fetched since this leader
took office has no known end, and while one is in the ISR the HW stays where the new leader
found it. One proposal at a time: what the ZooKeeper write brings back decides the next.

Each move of the HW says how many replicas it counted (``Decision.copies``): an acks=all
write it passes is acknowledged only if they are at least ``min.insync.replicas``
(``enough_copies``), else answered NotEnoughReplicasAfterAppend, as Kafka does: the ISR may
shrink to the leader alone after the append, and the HW then passes the write on one copy.
A write found already below the HW (a retry) counts the replicas that hold the HW now.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from twisted_broker.codec.kafka07.replication_errors import NotEnoughReplicas, NotLeaderForPartition


@dataclass
class FollowerPosition:
    end: int | None = None  # None: has not fetched from this leader yet
    caught_up_at_ms: int = 0
    last_fetch_at_ms: int = 0
    leader_end_at_last_fetch: int = -1
    fetches: int = 0  # recorded so far: a held fetch woken after a newer one is stale


@dataclass(frozen=True)
class Decision:
    """What the caller does after an event: a new high watermark to publish, an ISR to write."""

    high_watermark: int | None = None
    propose_isr: tuple[int, ...] | None = None
    # With a new high watermark: how many replicas (the leader included) it counted, all of
    # them holding everything below it. Fewer than min.insync.replicas: the acks=all writes
    # it passes are answered NotEnoughReplicasAfterAppend, not acknowledged.
    copies: int | None = field(default=None, compare=False)


NOTHING = Decision()


class LeaderPartition:
    """The leader's view of one partition; ``broker_id`` is this broker, always in the ISR."""

    def __init__(self, *, broker_id: int, leader_epoch: int, epoch_start_offset: int, replicas: Iterable[int],
                 isr: Iterable[int], log_end: int, high_watermark: int, now_ms: int, lag_time_max_ms: int,
                 min_insync_replicas: int = 1) -> None:
        self.broker_id = broker_id
        self.leader_epoch = leader_epoch
        self.epoch_start_offset = epoch_start_offset
        self.replicas = tuple(replicas)
        self.isr = tuple(isr) if broker_id in isr else (broker_id, *isr)
        self.log_end = log_end
        self.high_watermark = min(high_watermark, log_end)
        self.lag_time_max_ms = lag_time_max_ms
        self.min_insync_replicas = min_insync_replicas
        self.fenced = False
        self.pending_isr: tuple[int, ...] | None = None
        # Every follower starts as caught up now: a follower gets a full lag time to fetch
        # before it is dropped, as if it had just caught up when this leader took office.
        self.followers = {b: FollowerPosition(caught_up_at_ms=now_ms, last_fetch_at_ms=now_ms)
                          for b in self.replicas if b != broker_id}

    def replicas_changed(self, replicas: Iterable[int], now_ms: int) -> None:
        """The assignment changed (a reassignment adds replicas, then drops the old ones):
        new followers start as if caught up now; dropped ones are forgotten (the controller
        removes them from the ISR)."""
        self.replicas = tuple(replicas)
        for b in self.replicas:
            if b != self.broker_id and b not in self.followers:
                self.followers[b] = FollowerPosition(caught_up_at_ms=now_ms, last_fetch_at_ms=now_ms)
        for b in [b for b in self.followers if b not in self.replicas]:
            del self.followers[b]

    # -- writes ----------------------------------------------------------------------------

    def check_write(self, *, required_acks: int) -> None:
        """Raise unless a write may be appended now: NotLeaderForPartition when fenced,
        NotEnoughReplicas for acks=all (-1) while the ISR is smaller than min.insync.replicas."""
        if self.fenced:
            raise NotLeaderForPartition(f"broker {self.broker_id} is fenced at epoch {self.leader_epoch}")
        if required_acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise NotEnoughReplicas(f"{len(self.isr)} in-sync replica(s) {list(self.isr)}, "
                                    f"min.insync.replicas={self.min_insync_replicas}")

    def appended(self, log_end: int) -> Decision:
        """The leader's log grew to ``log_end``."""
        self.log_end = log_end
        return self._advance_high_watermark()

    # -- followers -------------------------------------------------------------------------

    def follower_fetched(self, replica: int, offset: int, now_ms: int, *, may_join: bool = True) -> Decision:
        """Follower ``replica`` asked for data from ``offset``: it holds everything before it.
        ``may_join``: False while the follower's broker is not registered in ZooKeeper (its
        session expired): it does not join the ISR then (Kafka's KIP-841), for a member
        the state cannot name a registration of would look restarted once it registers.

        Raises ValueError for a replica that is not assigned, or an offset past the log end
        (the caller answers those with an error and changes nothing)."""
        position = self.followers.get(replica)
        if position is None:
            raise ValueError(f"broker {replica} is not a follower of this partition ({list(self.replicas)})")
        if not 0 <= offset <= self.log_end:
            raise ValueError(f"follower {replica} fetches from {offset}, past the log end {self.log_end}")
        position.end, position.fetches = offset, position.fetches + 1
        if offset >= self.log_end:
            position.caught_up_at_ms = now_ms
        elif offset >= position.leader_end_at_last_fetch >= 0:
            position.caught_up_at_ms = max(position.caught_up_at_ms, position.last_fetch_at_ms)
        position.leader_end_at_last_fetch, position.last_fetch_at_ms = self.log_end, now_ms
        if replica in self.isr and offset < self.high_watermark:
            # An in-sync follower never holds less than the HW: this one restarted and lost its
            # unflushed tail. It must not stay electable as if it held every committed message.
            return self._shrink([replica])
        decision = self._advance_high_watermark()
        if (replica not in self.isr and self.pending_isr is None and not self.fenced and may_join
                and offset >= self.high_watermark and offset >= self.epoch_start_offset):
            return Decision(decision.high_watermark, self._propose((*self.isr, replica)))
        return decision

    def follower_seen(self, replica: int, at_ms: int) -> None:
        """Follower ``replica`` fetched at ``at_ms`` in a fetch session that holds this partition
        without listing it: its end is the one last recorded. Caught up then if that end is the
        leader's, as a fetch from there would be."""
        position = self.followers.get(replica)
        if position is not None and position.end is not None and position.end >= self.log_end:
            position.caught_up_at_ms = max(position.caught_up_at_ms, at_ms)

    def tick(self, now_ms: int) -> Decision:
        """Drop from the ISR the followers that have not caught up for too long."""
        lagging = [b for b in self.isr if b != self.broker_id and (  # no longer a replica, or behind
                   b not in self.followers or now_ms - self.followers[b].caught_up_at_ms > self.lag_time_max_ms)]
        return self._shrink(lagging)

    def brokers_gone(self, gone: Collection[int]) -> Decision:
        """Brokers whose ZooKeeper registration ended: out of the ISR at once."""
        return self._shrink([b for b in self.isr if b in gone and b != self.broker_id])

    def _shrink(self, out: list[int]) -> Decision:
        if not out or self.pending_isr is not None or self.fenced:
            return NOTHING
        return Decision(propose_isr=self._propose(tuple(b for b in self.isr if b not in out)))

    def _propose(self, isr: tuple[int, ...]) -> tuple[int, ...]:
        self.pending_isr = isr
        return isr

    # -- the ZooKeeper edge's answers -------------------------------------------------------

    def isr_written(self, isr: Iterable[int]) -> Decision:
        """The proposed (or another) ISR is now the partition state's."""
        self.pending_isr = None
        self.isr = tuple(isr)
        return self._advance_high_watermark()

    def isr_write_refused(self) -> None:
        """The write found a newer state; the caller re-reads it (and may fence this leader)."""
        self.pending_isr = None

    def fence(self) -> None:
        """Session suspended or lost, or a newer epoch seen: refuse writes, freeze the HW."""
        self.fenced = True

    def unfence(self) -> None:
        """The session is back and the state still names this broker at this epoch."""
        self.fenced = False

    # -- the high watermark -----------------------------------------------------------------

    def _advance_high_watermark(self) -> Decision:
        if self.fenced:
            return NOTHING
        ends = [self.log_end]
        for b in {*self.isr, *(self.pending_isr or ())}:
            if b != self.broker_id:
                end = self.followers[b].end if b in self.followers else None
                if end is None:
                    return NOTHING
                ends.append(end)
        candidate = min(ends)
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return Decision(high_watermark=candidate, copies=len(ends))
        return NOTHING

    def enough_copies(self, copies: int | None = None) -> bool:
        """Whether an acks=all write the high watermark passed with ``copies`` replicas
        counted may be acknowledged: an acknowledgement of acks=all means at least
        min.insync.replicas copies (Kafka's NOT_ENOUGH_REPLICAS_AFTER_APPEND otherwise).
        Without ``copies`` (a write already below the high watermark: an idempotent
        producer's retry), the replicas that hold the high watermark now, as Kafka counts
        its ISR at that moment: not the count of the high watermark's last move, which may
        have passed the write on the leader alone and then stays until the next append. A
        producer whose batch is refused so retries it alone, and nothing else is appended:
        the nemesis of 2026-12-07 saw one retry for 45 s, until the client timed out."""
        return (self.holders() if copies is None else copies) >= self.min_insync_replicas

    def holders(self) -> int:
        """Replicas holding everything below the high watermark now: the leader, and each
        ISR member whose fetches reached it, or that has not fetched from this leader yet
        (the HW has then not moved since this leader took office, and the ISR it was given
        held it). In practice the ISR's size, as Kafka counts."""
        return 1 + sum(1 for b in self.isr if b != self.broker_id and b in self.followers
                       and (self.followers[b].end is None or self.followers[b].end >= self.high_watermark))

    def follower_lag(self) -> dict[int, int | None]:
        """Bytes each follower is behind the leader's log end (None: not fetched yet)."""
        return {b: None if p.end is None else self.log_end - p.end for b, p in self.followers.items()}
