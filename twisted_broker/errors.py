"""Exceptions of twisted_broker, and the Kafka 0.7 error codes they carry on the wire.

Each wire error carries its 0.7 ``code`` (``common/ErrorMapping.scala``); ``ERRORS_BY_CODE``
maps a code read from a response back to its class. Errors found while decoding bytes carry
``position``, the byte index in the buffer where the bad item starts.
"""

from __future__ import annotations


class KafkaError(Exception):
    """Base of the errors that have a Kafka 0.7 error code."""

    code = -1


class UnknownError(KafkaError):
    """Code -1: any other failure while serving a fetch (bad topic name, I/O)."""

    code = -1


class OffsetOutOfRange(KafkaError):
    """Code 1: the offset is before the first segment or past the flushed end."""

    code = 1


class InvalidMessage(KafkaError):
    """Code 2: a message fails its CRC or is otherwise malformed."""

    code = 2

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"invalid message at byte {position}: {reason}")
        self.position = position
        self.reason = reason


class WrongPartition(KafkaError):
    """Code 3: the partition is negative or not below the topic's partition count."""

    code = 3


class InvalidFetchSize(KafkaError):
    """Code 4: the first message is larger than the fetch size, so no fetch can return it."""

    code = 4


class TopicAuthorizationFailed(KafkaError):
    """Code 29 (Kafka's TOPIC_AUTHORIZATION_FAILED, not 0.7's): an ACL refuses the principal
    the topic (docs/security.md). 0.7's own clients read it as their unknown error."""

    code = 29


ERRORS_BY_CODE: dict[int, type[KafkaError]] = {
    cls.code: cls
    for cls in (UnknownError, OffsetOutOfRange, InvalidMessage, WrongPartition, InvalidFetchSize,
                TopicAuthorizationFailed)
}


# Decoding errors. They are InvalidMessage so a caller that only cares "is this set valid"
# catches one class; the subclasses say which rule failed.

class InvalidMessageSize(InvalidMessage):
    """An entry's length field is smaller than the smallest message (5 bytes) or negative."""


class CrcMismatch(InvalidMessage):
    """The CRC32 stored in a message differs from the CRC32 of its payload."""


class UnknownMagic(InvalidMessage):
    """The magic byte is neither 0 nor 1."""


class UnknownCodec(InvalidMessage):
    """The attributes carry codec 3, or a codec this build cannot decompress."""


class CorruptWrapper(InvalidMessage):
    """A compressed wrapper's payload does not decompress, or holds an invalid message set."""


class TruncatedMessage(InvalidMessage):
    """The buffer ends inside an entry that the caller needed whole."""


class PartitionNotReady(KafkaError):
    """A write this broker cannot place yet: the partition's log here is a replica's, asked for
    as a 0.7 topic's, or the broker has not read replication's state from ZooKeeper since it
    started, so it cannot tell a 0.7 topic from a replicated one. Appending as 0.7 then lost
    acknowledged writes (the replica's log took them, and its leader's copy overwrote them)."""

    code = 6  # Kafka's NOT_LEADER_FOR_PARTITION: clients look the leader up again and retry


class MessageSizeTooLarge(KafkaError):
    """A top-level payload exceeds ``max.message.size``; 0.7.2 drops such a produce silently."""

    code = -1

    def __init__(self, position: int, size: int, limit: int) -> None:
        super().__init__(f"message at byte {position} has a {size}-byte payload, over the limit of {limit}")
        self.position = position
        self.size = size
        self.limit = limit


class CloseConnection(Exception):
    """A request refused the 0.7 way: the connection closes without a response (0.7's
    produce and offsets requests cannot carry an error code)."""


class Truncated(ValueError):
    """A request or response body ends before one of its fields."""

    def __init__(self, position: int, needed: int, available: int) -> None:
        super().__init__(f"truncated at byte {position}: need {needed} bytes, {available} left")
        self.position = position


class UnexpectedResponse(ValueError):
    """A broker's response does not fit its request (bad size, wrong count, stray bytes).

    The connection is closed when this is raised: the stream is out of step.
    """


class InvalidTopic(ValueError):
    """A topic name that is empty, too long, or could escape the log directory."""


class LogWriteError(OSError):
    """An append or flush failed on disk; the partition refuses writes until it is reopened."""
