"""Replication's errors, with the codes Kafka 0.8+ gives them on the wire (docs/replication.md §5).

0.7's codes (errors.py) stop at 4; these are only sent on replication's own request types,
which no 0.7 client sends, so the two tables never meet on one connection.
"""

from __future__ import annotations

from twisted_broker.errors import KafkaError


class NotLeaderForPartition(KafkaError):
    """Code 6: this broker does not lead the partition (or is fenced)."""

    code = 6


class RequestTimedOut(KafkaError):
    """Code 7: the in-sync replicas did not all acknowledge within the request's timeout."""

    code = 7


class NotEnoughReplicas(KafkaError):
    """Code 19: fewer in-sync replicas than min.insync.replicas; nothing was appended."""

    code = 19


class NotEnoughReplicasAfterAppend(KafkaError):
    """Code 20: appended, but the ISR shrank below min.insync.replicas before it committed."""

    code = 20


class NotAReplica(KafkaError):
    """Code 56: the requesting broker is not a replica of the partition."""

    code = 56


class FetchSessionIdNotFound(KafkaError):
    """Code 70: the follower's fetch session is not this leader's (it restarted, or a newer
    session replaced it): the follower starts a new one."""

    code = 70


class InvalidFetchSessionEpoch(KafkaError):
    """Code 71: the fetch is not the session's next one: the follower starts a new session."""

    code = 71


class FencedLeaderEpoch(KafkaError):
    """Code 74: the requester's leader epoch is older than this leader's."""

    code = 74


class UnknownLeaderEpoch(KafkaError):
    """Code 75: the requester's leader epoch is newer than this broker's: it is deposed."""

    code = 75


REPLICATION_ERRORS_BY_CODE: dict[int, type[KafkaError]] = {
    cls.code: cls for cls in (NotLeaderForPartition, RequestTimedOut, NotEnoughReplicas,
                              NotEnoughReplicasAfterAppend, NotAReplica, FetchSessionIdNotFound, InvalidFetchSessionEpoch,
                              FencedLeaderEpoch, UnknownLeaderEpoch)
}
