"""Errors that only clients raise (0.7's QueueFullException, NoBrokersForPartitionException...).

The wire errors a broker reports by code (OffsetOutOfRange, ...), MessageSizeTooLarge and
UnexpectedResponse (a response that fits no request) live in ``twisted_broker.errors``;
``error_for_code`` builds one of those from a response's code.
"""

from __future__ import annotations

from twisted_broker.errors import ERRORS_BY_CODE, InvalidMessage, KafkaError, UnknownError


class ProducerError(Exception):
    """Base of the errors a producer raises on its own (not reported by a broker)."""


class QueueFull(ProducerError):
    """The async queue stayed full for ``queue.enqueueTimeout.ms``; the message was not queued."""


class ProducerClosed(ProducerError):
    """send() after close() (0.7's QueueClosedException)."""


class NoBrokersForPartition(ProducerError):
    """No broker is known for the topic, or the chosen broker vanished from the registry."""


class InvalidPartition(ProducerError):
    """A partitioner returned an index outside ``[0, number of partitions)``."""


class LeaderNotAvailable(ConnectionError):
    """A replicated topic's partition had no leader until the caller's deadline (its replicas
    are offline). A ConnectionError: callers that retry a lost broker retry this too."""


class ReplicasUnavailable(ConnectionError):
    """No replica of a replicated topic's partition answered (each refused the connection,
    timed out, or could not serve the offsets asked) within the caller's bound. A
    ConnectionError, as LeaderNotAvailable."""


def error_for_code(code: int, detail: str) -> KafkaError:
    """The exception for a 0.7 error code read from a response; unknown codes are UnknownError."""
    cls = ERRORS_BY_CODE.get(code, UnknownError)
    if issubclass(cls, InvalidMessage):  # its constructor wants a position: none on this path
        return cls(-1, detail)
    return cls(f"{detail} (error code {code})")
