"""TwistedLeaderProducer: the Twisted-native producer of replicated topics, every call a Deferred.

It does what client/leader_sender.py does for the blocking Producer, on the reactor: asks a
broker for the topic's metadata (client/replicated_topics.py; asking creates an unknown topic
where default.replication.factor is above 1), sends each set as a ProduceAck request to its
partition's leader with ``required_acks`` and ``timeout_ms``, and on error 6, 3 or 7 or a lost
connection refreshes the metadata and sends again, with a growing pause, waiting while the
partition has no leader, until ``give_up_after_ms`` has passed. At least once: a resend after
a leader change may duplicate a set. Error 19/20 fails the Deferred at once with
NotEnoughReplicas(AfterAppend) naming the partition and its ISR.

For a 0.7 topic (metadata error 3, or brokers that close the connection on the metadata
request, which is what a Kafka 0.7 broker does), ``metadata`` answers None and ``send`` fails
with WrongPartition: use TwistedProducer, 0.7's path, for those.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from twisted.internet.defer import Deferred, DeferredList, TimeoutError as DeferredTimeout, inlineCallbacks
from twisted.internet.error import ConnectError, ConnectionClosed
from twisted.internet.task import deferLater

from twisted_broker.client.replicated_topics import (
    FAIL, RETRY, Address, LeaderBackoff, ReplicatedTopic, ack_error, ack_outcome, replicated_topic,
)
from twisted_broker.network.kafka07_client import KafkaClientProtocol, connect_client
from twisted_broker.errors import WrongPartition
from twisted_broker.codec.kafka07.compression import NO_COMPRESSION
from twisted_broker.codec.kafka07.message_set import encode_compressed_message_set
from twisted_broker.codec.kafka07.primitives import Buffer
from twisted_broker.codec.kafka07.replication import (
    MetadataRequest, ProduceAckRequest, decode_metadata, decode_produce_acks, encode_replication_request,
)
from twisted_broker.codec.kafka07.requests import MultiProduceRequest, ProduceRequest

log = logging.getLogger(__name__)

# What a broker that is gone (or not ours) looks like from here: refused, lost, closed, late.
_LOST = (OSError, ConnectError, ConnectionClosed, DeferredTimeout)


class TwistedLeaderProducer:
    """Produces to replicated topics of the cluster that ``brokers`` (``(host, port)`` pairs)
    belong to; connections are made on first use, one per broker, and kept until close()."""

    def __init__(self, reactor, brokers: Iterable[Address], *, required_acks: int = -1, timeout_ms: int = 10000,
                 give_up_after_ms: int = 30000, connect_timeout_ms: int = 1000) -> None:
        self._reactor = reactor
        self._bootstrap = [tuple(b) for b in brokers]
        self._required_acks, self._timeout_ms = required_acks, timeout_ms
        self._give_up_after_s, self._connect_timeout_s = give_up_after_ms / 1000, connect_timeout_ms / 1000
        self._connections: dict[Address, KafkaClientProtocol] = {}
        self._topics: dict[str, ReplicatedTopic | None] = {}
        self._known: list[Address] = []

    @inlineCallbacks
    def metadata(self, topic: str, refresh: bool = False):
        """Fires with the topic's ReplicatedTopic (kept), None for a 0.7 topic; fails with
        ConnectionError when no broker answers."""
        if topic in self._topics and not refresh:
            return self._topics[topic]
        failures, closed = [], 0
        for address in dict.fromkeys([*self._known, *self._bootstrap]):
            try:
                protocol = yield self._connection(address)
                error, body = yield protocol.request(encode_replication_request(MetadataRequest((topic,))))
            except _LOST as exc:  # this broker cannot say: ask the next
                self._drop(address)
                failures.append(f"{address[0]}:{address[1]}: {exc}")
                closed += isinstance(exc, ConnectionClosed)  # connected, then closed on type 103
                continue
            metadata = decode_metadata(body)
            self._known = [(host, port) for _b, host, port in metadata.brokers]
            self._topics[topic] = answer = replicated_topic(metadata, topic)
            return answer
        if closed == len(failures) and failures:
            self._topics[topic] = None  # every broker closed the connection on type 103: Kafka 0.7
            return None
        raise ConnectionError(f"no broker answered a metadata request for topic {topic}: " + "; ".join(failures))

    @inlineCallbacks
    def send(self, topic: str, partition: int, payloads: Iterable[Buffer], codec: int = NO_COMPRESSION):
        """Send ``payloads`` as one set to the partition's leader; fires with the offset the
        leader appended it at (-1 for required_acks 0) once acknowledged."""
        message_set = encode_compressed_message_set(payloads, codec)
        request = encode_replication_request(ProduceAckRequest(
            self._required_acks, self._timeout_ms, MultiProduceRequest((ProduceRequest(topic, partition, message_set),))))
        deadline = self._reactor.seconds() + self._give_up_after_s
        backoff = LeaderBackoff()
        current = yield self.metadata(topic)
        while True:
            if current is None or not 0 <= partition < current.partition_count:
                raise WrongPartition(f"topic {topic} has no replicated partition {partition}")
            leader = current.leader(partition)
            error: Exception | None = None
            if leader is None:
                error = ConnectionError(f"topic {topic} partition {partition} has no leader")
            else:
                try:
                    protocol = yield self._connection(leader[1])
                    if self._required_acks == 0:
                        yield protocol.send(request)
                        return -1
                    _error, body = yield protocol.request(request)
                    [(_topic, _partition, code, offset)] = decode_produce_acks(body)
                except _LOST as exc:
                    self._drop(leader[1])
                    error = exc
                else:
                    outcome = ack_outcome(code)
                    if outcome is None:
                        return offset
                    if outcome == FAIL:
                        refreshed = yield self._refresh_quietly(topic)
                        isr = refreshed.isr(partition) if refreshed is not None else ()
                        raise ack_error(topic, partition, code, isr)
                    assert outcome == RETRY
                    error = ack_error(topic, partition, code)
            remaining = deadline - self._reactor.seconds()
            if remaining <= 0:
                raise error
            log.info("producing to %s-%d: %s; finding the leader again", topic, partition, error)
            yield deferLater(self._reactor, backoff.next_pause_s(remaining), lambda: None)
            current = (yield self._refresh_quietly(topic)) or current

    def close(self) -> Deferred:
        """Close every connection; fires once they are closed."""
        protocols, self._connections = list(self._connections.values()), {}
        return DeferredList([protocol.close() for protocol in protocols])

    @inlineCallbacks
    def _refresh_quietly(self, topic: str):
        try:
            return (yield self.metadata(topic, refresh=True))
        except ConnectionError as exc:
            log.info("refreshing the metadata of %s failed: %s", topic, exc)
            return None

    @inlineCallbacks
    def _connection(self, address: Address):
        """Fires with the connection to ``address``, made on first use and again once lost."""
        protocol = self._connections.get(address)
        if protocol is None or protocol.disconnected.called:
            protocol = yield connect_client(self._reactor, *address, timeout_s=self._connect_timeout_s)
            stale, self._connections[address] = self._connections.get(address), protocol
            if stale is not None and stale is not protocol:
                stale.close()
        return protocol

    def _drop(self, address: Address) -> None:
        protocol = self._connections.pop(address, None)
        if protocol is not None:
            protocol.close()
