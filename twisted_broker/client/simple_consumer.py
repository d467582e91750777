"""SimpleConsumer: Fetch, MultiFetch and Offsets requests to one broker, blocking (0.7's
``kafka.consumer.SimpleConsumer``).

It keeps no offsets and knows no groups: the caller says where to read and carries
``next_offset`` forward. The ZooKeeper consumer group (rebalancing, committed offsets, fetcher
threads) is built on top of it. Calls are serialized by a lock, so one instance may be shared
between threads, though each call waits for the one before it (0.7 connections serve one
request at a time).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from twisted_broker.client.connection import BrokerConnection
from twisted_broker.client.errors import error_for_code
from twisted_broker.client.fetched_message_set import FetchedMessageSet, decode_multifetch_response
from twisted_broker.client.replicated_topics import request_metadata
from twisted_broker.codec.kafka07.replication import Metadata
from twisted_broker.codec.kafka07.requests import (  # LATEST_TIME, EARLIEST_TIME: kept importable from here
    EARLIEST_TIME, LATEST_TIME, FetchRequest, MultiFetchRequest, OffsetRequest, encode_request,
)
from twisted_broker.codec.kafka07.responses import NO_ERROR, decode_offsets
from twisted_broker.errors import UnexpectedResponse


class SimpleConsumer:
    """A consumer of ``host:port``; it connects on first use, with ``socket_timeout_ms`` as the
    connect timeout too (unless ``connect_timeout_ms`` is given), and a ``buffer_size`` socket
    receive buffer (socket.buffersize)."""

    def __init__(self, host: str, port: int, socket_timeout_ms: int = 30000,
                 buffer_size: int = 65536, *, connect_timeout_ms: int | None = None) -> None:
        self.host, self.port = host, port
        connect_timeout_ms = socket_timeout_ms if connect_timeout_ms is None else connect_timeout_ms
        self._connection = BrokerConnection(host, port, connect_timeout_ms=connect_timeout_ms,
                                            socket_timeout_ms=socket_timeout_ms,
                                            receive_buffer_bytes=buffer_size)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SimpleConsumer({self.host}:{self.port})"

    def fetch(self, request: FetchRequest) -> FetchedMessageSet:
        """Fetch one partition. The broker's error code is in the result (``check()``).

        Raises ConnectionError (after one reconnect and retry), TimeoutError, or
        UnexpectedResponse.
        """
        with self._lock:
            error, body = self._connection.request(encode_request(request))
            # The connection reuses its buffer: the set must outlive the next request (the
            # group consumer queues sets), so it is copied once, a memcpy per fetch.
            return FetchedMessageSet(request, error, body.tobytes())

    def multifetch(self, requests: Sequence[FetchRequest]) -> list[FetchedMessageSet]:
        """Fetch several partitions in one request; one result per request, in order.

        Raises as fetch() does; ValueError for more than 32767 requests.
        """
        requests = tuple(requests)
        with self._lock:
            error, body = self._connection.request(encode_request(MultiFetchRequest(requests)))
            return decode_multifetch_response(requests, error, body.tobytes())

    def get_offsets_before(self, topic: str, partition: int, time: int, max_offsets: int) -> list[int]:
        """Offsets of segment starts written before ``time`` (ms since the epoch; LATEST_TIME,
        EARLIEST_TIME), newest first, at most ``max_offsets`` (spec 4.4).

        A 0.7 broker answers a bad topic or partition by closing the connection, so those come
        back as ConnectionError (after the one retry).
        """
        with self._lock:
            request = encode_request(OffsetRequest(topic, partition, time, max_offsets))
            error, body = self._connection.request(request)
            if error != NO_ERROR:
                raise error_for_code(error, f"offsets of {topic}-{partition}")
            try:
                return decode_offsets(body)
            except ValueError as exc:  # Truncated
                raise UnexpectedResponse(f"malformed offsets response: {exc}") from None

    def metadata(self, topics: Sequence[str]) -> Metadata | None:
        """The metadata of ``topics`` (replicated_topics.request_metadata): None if this
        broker is not ours. Asking creates an unknown topic on a cluster whose
        default.replication.factor is above 1. Raises ConnectionError, TimeoutError."""
        with self._lock:
            return request_metadata(self._connection, topics)

    def close(self) -> None:
        """Close the connection; a later call opens a new one."""
        with self._lock:
            self._connection.close()

    def __enter__(self) -> "SimpleConsumer":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
