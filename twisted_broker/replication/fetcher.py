"""Followers' fetching (docs/replication.md §3, TRUNCATING and FOLLOWING): one connection per
leader broker, carrying every partition this broker follows there.

Each round: partitions that start following ask the leader where their latest epoch ends and
cut their logs there (epochs.py); then one ReplicaFetch for all the others, which the leader
holds up to ``fetch_wait_max_ms`` when nothing is new. The fetch carries a fetch session
(docs/replication.md §5): the first on a connection lists every partition, each next one
only those whose end (or leader epoch) moved and those no longer followed there, and the
answer carries only the partitions with something new. Each answer's bytes are CRC-checked and
appended verbatim, so the replica's segment files are byte-identical to the leader's, with the
leader's epoch entries recorded first; the replica's high watermark is then
``min(leader's, own log end)``. An answer for a partition whose role changed while the request
was out is dropped. A leader that cannot be reached is tried again after a pause, at the
address ZooKeeper gives at that moment.
"""

from __future__ import annotations

import logging
import random

from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import deferLater

from twisted_broker.network.kafka07_client import connect_client
from twisted_broker.errors import InvalidMessage, OffsetOutOfRange
from twisted_broker.replication.epochs import first_question, follower_truncation
from twisted_broker.codec.kafka07.replication_errors import (
    FencedLeaderEpoch, FetchSessionIdNotFound, InvalidFetchSessionEpoch, NotLeaderForPartition, UnknownLeaderEpoch,
)
from twisted_broker.replication.replica import Replica, Role
from twisted_broker.replication.replica_manager import ReplicaManager
from twisted_broker.codec.kafka07.requests import EARLIEST_TIME
from twisted_broker.codec.kafka07.message_set import validate_message_set
from twisted_broker.codec.kafka07.replication import (
    NEW_SESSION, EpochEndOffsetRequest, EpochQuery, ReplicaFetchPartition, ReplicaFetchRequest, decode_epoch_end_offsets,
    decode_replica_fetch_response, encode_replication_request,
)
from twisted_broker.codec.kafka07.requests import OffsetRequest, encode_request
from twisted_broker.codec.kafka07.responses import decode_offsets

log = logging.getLogger(__name__)

FETCHER_RETRY_S = 0.5
STALE_STATE_CODES = {NotLeaderForPartition.code, FencedLeaderEpoch.code, UnknownLeaderEpoch.code}
SESSION_CODES = {FetchSessionIdNotFound.code, InvalidFetchSessionEpoch.code}


class Fetchers:
    """The fetchers of one broker, one per leader it follows."""

    def __init__(self, manager: ReplicaManager, *, reactor, fetch_wait_max_ms: int, fetch_max_bytes: int,
                 connect_timeout_s: float = 5.0, connect=connect_client, rng: random.Random | None = None) -> None:
        self.manager = manager
        self.rng = rng or random.Random()  # the retries' jitter; tests/simulation seeds it
        self.reactor = reactor
        # ``connect(reactor, host, port, timeout_s=...)`` -> Deferred of a connection with
        # ``request(bytes)`` -> Deferred (error, body), ``disconnected`` and ``close()``:
        # network/kafka07_client's in the broker, an in-memory one in tests/simulation/.
        self.connect = connect
        self.fetch_wait_max_ms = fetch_wait_max_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.connect_timeout_s = connect_timeout_s
        self.fetchers: dict[int, LeaderFetcher] = {}
        manager.on_follow = self.follow

    def follow(self, replica: Replica) -> None:
        """The replica's role changed: fetch it from its leader, or from nobody."""
        for fetcher in self.fetchers.values():
            fetcher.replicas.pop((replica.topic, replica.partition), None)
        if replica.role in (Role.TRUNCATING, Role.FOLLOWING) and not (self.manager.stopping or self.manager.leaving):
            fetcher = self.fetchers.get(replica.leader_id)
            if fetcher is None:
                fetcher = self.fetchers[replica.leader_id] = LeaderFetcher(self, replica.leader_id)
            fetcher.replicas[(replica.topic, replica.partition)] = replica
            fetcher.start()

    def stop(self) -> None:
        for fetcher in self.fetchers.values():
            fetcher.stop()

    def lag(self) -> dict[str, int]:
        """Bytes each followed partition is behind what its leader last said it had."""
        return {r.name: f.leader_ends.get(key, r.log.written_end) - r.log.written_end
                for f in self.fetchers.values() for key, r in f.replicas.items()}


class LeaderFetcher:
    def __init__(self, fetchers: Fetchers, leader_id: int) -> None:
        self.fetchers = fetchers
        self.manager = fetchers.manager
        self.leader_id = leader_id
        self.replicas: dict[tuple[str, int], Replica] = {}
        self.leader_ends: dict[tuple[str, int], int] = {}
        self._out_of_range: list[Replica] = []  # answered OffsetOutOfRange: see _realign
        self.running = False
        self._protocol = None
        self._new_session()

    def _new_session(self) -> None:
        """The next fetch lists every partition (a new connection, or the leader lost ours)."""
        self._session_id, self._session_epoch = 0, NEW_SESSION
        # What the leader's session holds per partition: (leader epoch, offset, max bytes, flushed offset).
        self._sent: dict[tuple[str, int], tuple[int, int, int, int]] = {}

    def start(self) -> None:
        if not self.running:
            self.running = True
            self._loop().addErrback(self._crashed)

    def stop(self) -> None:
        self.running = False
        if self._protocol is not None:
            self._protocol.close()

    def _crashed(self, failure) -> None:
        self.running = False
        log.error("fetcher from broker %d stopped: %s", self.leader_id, failure.getTraceback())

    @inlineCallbacks
    def _loop(self):
        reactor = self.fetchers.reactor
        while self.running and self.replicas and not (self.manager.stopping or self.manager.leaving):
            try:
                if self._protocol is None:
                    address = self.manager.cluster.brokers.get(self.leader_id)
                    if address is None:
                        yield deferLater(reactor, FETCHER_RETRY_S, lambda: None)
                        continue
                    self._protocol = yield self.fetchers.connect(reactor, *address,
                                                                 timeout_s=self.fetchers.connect_timeout_s)
                    self._new_session()
                    self._protocol.disconnected.addBoth(self._disconnected, self._protocol)
                truncating = [r for r in self.replicas.values() if r.role is Role.TRUNCATING]
                if truncating:
                    yield self._truncate(truncating)
                following = [r for r in self.replicas.values() if r.role is Role.FOLLOWING]
                if following:
                    progressed = yield self._fetch(following)
                elif not truncating:
                    break
                else:
                    progressed = False
                if not progressed:  # only errors: let ZooKeeper's news arrive before asking again
                    yield deferLater(reactor, FETCHER_RETRY_S / 5, lambda: None)
            except Exception as exc:
                if self.running:
                    log.warning("fetching from broker %d: %s; again in %.1f s", self.leader_id, exc, FETCHER_RETRY_S)
                if self._protocol is not None:
                    self._protocol.close()
                    self._protocol = None
                yield deferLater(reactor, FETCHER_RETRY_S * (0.5 + self.fetchers.rng.random()), lambda: None)
        self.running = False
        if self._protocol is not None:  # nothing left to follow there
            self._protocol.close()
            self._protocol = None

    def _disconnected(self, _result, protocol) -> None:
        if self._protocol is protocol:
            self._protocol = None
            self._new_session()

    def _request(self, request):
        return self._request_bytes(encode_replication_request(request))

    def _request_0_7(self, request):
        return self._request_bytes(encode_request(request))

    @inlineCallbacks
    def _request_bytes(self, data: bytes):
        error, body = yield self._request_answer(data)
        return body

    def _request_answer(self, data: bytes):
        """A Deferred of the answer's (error, body)."""
        protocol = self._protocol
        if protocol is None:
            raise ConnectionError(f"not connected to broker {self.leader_id}")
        return protocol.request(data)

    @inlineCallbacks
    def _truncate(self, replicas: list[Replica]):
        steps = {}
        for replica in replicas:
            step = first_question(replica.epochs, log_end=replica.log.written_end,
                                  high_watermark=replica.log.end_offset)
            steps[(replica.topic, replica.partition)] = (replica, replica.leader_epoch, step)
        while steps:
            for key, (replica, epoch, step) in list(steps.items()):
                if replica.role is not Role.TRUNCATING or replica.leader_epoch != epoch:
                    del steps[key]  # the state moved on while we asked
                elif step.offset is not None:
                    cut = replica.log.written_end - step.offset
                    replica.truncate(step.offset)
                    log.info("%s: following broker %d from offset %d%s", replica.name, self.leader_id, step.offset,
                             f" (cut {cut} bytes the leader does not have)" if cut else "")
                    del steps[key]
            if not steps:
                return
            asked = list(steps.values())
            request = EpochEndOffsetRequest(self.manager.broker_id, tuple(
                EpochQuery(r.topic, r.partition, epoch, step.ask_epoch) for r, epoch, step in asked))
            answers = decode_epoch_end_offsets((yield self._request(request)))
            for (replica, epoch, step), (error, leader_epoch, end) in zip(asked, answers):
                key = (replica.topic, replica.partition)
                if error:
                    del steps[key]
                    self._stale(replica, error)
                    continue
                steps[key] = (replica, epoch, follower_truncation(
                    replica.epochs, log_end=replica.log.written_end, high_watermark=replica.log.end_offset,
                    leader_epoch=leader_epoch, leader_end_offset=end))
            if any(s[2].offset is None and s[2].ask_epoch is None for s in steps.values()):
                raise AssertionError("truncation step without an offset or a question")

    @inlineCallbacks
    def _fetch(self, replicas: list[Replica]):
        full = self._session_epoch == NEW_SESSION
        following, listed = {}, []
        max_bytes = self.fetchers.fetch_max_bytes
        for replica in replicas:
            key = (replica.topic, replica.partition)
            following[key] = replica
            now = (replica.leader_epoch, replica.log.written_end, max_bytes, replica.log.flushed_end)
            if full or self._sent.get(key) != now:
                listed.append((key, now))
        forgotten = () if full else tuple(key for key in self._sent if key not in following)
        request = ReplicaFetchRequest(
            self.manager.broker_id, self.fetchers.fetch_wait_max_ms, 1,
            tuple(ReplicaFetchPartition(topic, partition, *now) for (topic, partition), now in listed),
            self._session_id, self._session_epoch, forgotten)
        error, body = yield self._request_answer(encode_replication_request(request))
        if error in SESSION_CODES:  # the leader restarted, or lost track: start again
            log.info("fetch session %d with broker %d ended (error %d); starting a new one", self._session_id,
                     self.leader_id, error)
            self._new_session()
            return True
        session_id, answers = decode_replica_fetch_response(body)
        # What the leader's session holds now.
        if full:
            self._sent = {}
        self._sent.update(listed)
        for key in forgotten:
            self._sent.pop(key, None)
        self._session_id, self._session_epoch = session_id, request.session_epoch + 1
        progressed = not answers
        for answer in answers:
            key = (answer.topic, answer.partition)
            replica, sent = self.replicas.get(key), self._sent.get(key)
            if replica is None or sent is None or replica.role is not Role.FOLLOWING or replica.leader_epoch != sent[0]:
                continue  # its role changed while the request was out: the next fetch says so
            if answer.error:
                del self._sent[key]  # listed again next time, whatever its end
                self._stale(replica, answer.error)
                continue
            progressed = True
            self.leader_ends[key] = answer.log_end
            if not self._append(replica, answer):
                del self._sent[key]
        if self._out_of_range:
            replicas, self._out_of_range = self._out_of_range, []
            for replica in replicas:
                yield self._realign(replica)
        return progressed

    @inlineCallbacks
    def _realign(self, replica: Replica):
        """The leader has no data at this follower's end: before its start (retention deleted
        what the follower lacks: restart empty at the leader's start), or past its end
        (truncate by epoch again)."""
        body = yield self._request_0_7(OffsetRequest(replica.topic, replica.partition, EARLIEST_TIME, 1))
        [leader_start] = decode_offsets(body) or [0]
        if replica.log.written_end < leader_start:
            replica.log.restart_at(leader_start)
            replica.epochs.truncate_from_start(leader_start)
            replica.save_epochs()
        else:
            log.warning("%s: the leader has no offset %d; truncating again", replica.name, replica.log.written_end)
            replica.role = Role.TRUNCATING

    def _append(self, replica: Replica, answer) -> bool:
        """Take the answer's messages and high watermark; False if the bytes fail their check."""
        log_ = replica.log
        if len(answer.messages):
            try:
                messages = validate_message_set(answer.messages)
            except InvalidMessage as exc:
                # The leader checked these bytes when they were produced: a damaged copy is a
                # network or disk fault. Take nothing and ask again.
                log.error("%s: the leader's bytes at %d fail their check (%s); fetching again", replica.name,
                          log_.written_end, exc)
                return False
            replica.copy_epochs(answer.epochs)
            log_.append(messages)
        log_.publish_to(min(answer.high_watermark, log_.written_end))
        return True

    def _stale(self, replica: Replica, error: int) -> None:
        if error in STALE_STATE_CODES:
            # Our idea of the leader is out of date (or theirs is): ZooKeeper decides.
            self.manager.cluster.reread_state(replica.topic, replica.partition)
        elif error == OffsetOutOfRange.code:
            self._out_of_range.append(replica)
        else:
            log.warning("%s: the leader answers error %d", replica.name, error)
