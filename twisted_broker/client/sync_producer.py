"""SyncProducer: Produce and MultiProduce requests to one broker, blocking (0.7's
``kafka.producer.SyncProducer``).

0.7 produce requests have no response: a send returns once the request is written, and a
refused request (bad CRC, unknown topic name) only shows as the broker closing the
connection, which the next send notices and reconnects (connection.py). The one check that
can be made here is 0.7's client-side ``max.message.size``: a payload over it would be
dropped silently by a 0.7.2 broker, so it is refused before sending.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from twisted_broker.client.connection import BrokerConnection
from twisted_broker.client.replicated_topics import request_metadata
from twisted_broker.codec.kafka07.message_set import scan
from twisted_broker.codec.kafka07.primitives import Buffer
from twisted_broker.codec.kafka07.replication import (
    Metadata, ProduceAckRequest, decode_produce_acks, encode_replication_request,
)
from twisted_broker.codec.kafka07.requests import MultiProduceRequest, ProduceRequest, encode_request
from twisted_broker.errors import UnexpectedResponse

RANDOM_PARTITION = -1  # 0.7's ProducerRequest.RandomPartition: the broker picks one


class SyncProducer:
    """A producer to ``host:port``; it connects on first use. Thread-safe: sends are serialized.

    The keyword arguments are the 0.7 producer keys of the same names (spec 6.2).
    """

    def __init__(self, host: str, port: int, *, buffer_size: int = 102400,
                 connect_timeout_ms: int = 5000, socket_timeout_ms: int = 30000,
                 reconnect_interval: int = 30000, reconnect_time_interval_ms: int = 10000000,
                 max_message_size: int = 1000000) -> None:
        self.host, self.port = host, port
        self.max_message_size = max_message_size
        self._connection = BrokerConnection(
            host, port, connect_timeout_ms=connect_timeout_ms, socket_timeout_ms=socket_timeout_ms,
            send_buffer_bytes=buffer_size, reconnect_interval=reconnect_interval,
            reconnect_time_interval_ms=reconnect_time_interval_ms)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SyncProducer({self.host}:{self.port})"

    def send(self, topic: str, partition: int, message_set: Buffer) -> None:
        """Send one message set as a Produce request (``partition`` -1: the broker picks).

        Raises MessageSizeTooLarge (nothing sent), ConnectionError (after one reconnect and
        resend) or TimeoutError.
        """
        self._check_sizes(message_set)
        self._send(encode_request(ProduceRequest(topic, partition, message_set)))

    def multi_send(self, produces: Iterable[tuple[str, int, Buffer]]) -> None:
        """Send ``(topic, partition, message set)`` triples as one MultiProduce request.

        Raises as send() does (nothing is sent if any set is too large); ValueError for more
        than 32767 triples.
        """
        requests = tuple(ProduceRequest(topic, partition, message_set)
                         for topic, partition, message_set in produces)
        for request in requests:
            self._check_sizes(request.messages)
        self._send(encode_request(MultiProduceRequest(requests)))

    def send_acked(self, produces: Iterable[tuple[str, int, Buffer]], *, required_acks: int,
                   timeout_ms: int) -> list[tuple[str, int, int, int]]:
        """Send ``(topic, partition, message set)`` triples as one ProduceAck request (to the
        leaders of replicated topics) and return the broker's ``(topic, partition, error,
        offset)`` per triple; ``[]`` for ``required_acks`` 0, which has no answer.

        Raises as send(); a resend after a broken connection may append the sets twice.
        """
        requests = tuple(ProduceRequest(topic, partition, message_set) for topic, partition, message_set in produces)
        for request in requests:
            self._check_sizes(request.messages)
        data = encode_replication_request(ProduceAckRequest(required_acks, timeout_ms, MultiProduceRequest(requests)))
        with self._lock:
            if required_acks == 0:
                self._connection.send(data)
                return []
            error, body = self._connection.request(data)
            try:
                answers = decode_produce_acks(body)
            except ValueError as exc:  # Truncated
                raise UnexpectedResponse(f"malformed produce-ack answer from {self}: {exc}") from None
        if error or len(answers) != len(requests):
            raise UnexpectedResponse(f"{self} answered {len(answers)} parts (error {error}) to {len(requests)}")
        return answers

    def metadata(self, topics: Iterable[str]) -> Metadata | None:
        """The brokers' metadata of ``topics`` (replicated_topics.request_metadata): None if
        this broker is not ours (a Kafka 0.7 broker). Raises ConnectionError, TimeoutError."""
        with self._lock:
            return request_metadata(self._connection, topics)

    def close(self) -> None:
        """Close the connection; a later send opens a new one."""
        with self._lock:
            self._connection.close()

    def _check_sizes(self, message_set: Buffer) -> None:
        # Top-level payloads, as 0.7.1+'s client (a shallow walk) and the 0.7.2 broker check
        # them: for a compressed wrapper, the compressed size. scan raises MessageSizeTooLarge.
        # A set smaller than the limit cannot hold an oversize payload: the usual batch needs
        # no walk (the walk was a third of the producer's time).
        if len(message_set) - 9 > self.max_message_size:
            scan(message_set, check_crc=False, max_payload_bytes=self.max_message_size)

    def _send(self, request: bytes) -> None:
        with self._lock:
            self._connection.send(request)

    def __enter__(self) -> "SyncProducer":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
