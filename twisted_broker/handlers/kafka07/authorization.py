"""The authorizer's checks on the Kafka 0.7 port (docs/security.md, "The Kafka 0.7 port").

0.7 has no authentication: the principal is the connection's (``User:ANONYMOUS`` unless a
TLS client certificate names one), the host its peer's address. The same ACLs as the modern
listener's apply, refused the only ways 0.7 can carry:

- Produce, MultiProduce, ProduceAck (Write on each topic), replication's Metadata (Describe
  on each topic), ReplicaFetch and EpochEndOffset (ClusterAction on the cluster: followers
  only): ``CloseConnection``, one WARNING naming the peer and the principal. A MultiProduce
  with one refused topic appends none of its parts.
- Fetch, MultiFetch (Read), Offsets (Describe): error code 29 (TOPIC_AUTHORIZATION_FAILED) for
  the refused fetch or in the Offsets header, no data. 0.7's clients map any code they do not
  know to their unknown error, as they would -1; ours name it (errors.TopicAuthorizationFailed).
"""

from __future__ import annotations

from collections.abc import Callable

from twisted_broker.codec.kafka07.primitives import INT32
from twisted_broker.codec.kafka07.replication import (
    EpochEndOffsetRequest, MetadataRequest, ProduceAckRequest, ReplicaFetchRequest,
)
from twisted_broker.codec.kafka07.requests import (
    FetchRequest, Kafka07Request, MultiFetchRequest, MultiProduceRequest, OffsetRequest, ProduceRequest,
)
from twisted_broker.codec.kafka07.responses import NO_ERROR, encode_response_header
from twisted_broker.errors import CloseConnection, TopicAuthorizationFailed
from twisted_broker.security.acl import CLUSTER_NAME, Operation, ResourceType
from twisted_broker.security.authorizer import AclAuthorizer
from twisted_broker.storage.segment import FileRegion, Piece

REFUSED_FETCH = encode_response_header(TopicAuthorizationFailed.code, 0)
REFUSED_OFFSETS = encode_response_header(TopicAuthorizationFailed.code, INT32.size) + INT32.pack(0)


class Kafka07Authorization:
    """Serves a request through ``serve`` (the Broker's handlers) if ``authorizer`` allows it."""

    def __init__(self, authorizer: AclAuthorizer) -> None:
        self.authorizer = authorizer

    def handle(self, request: Kafka07Request, serve: Callable[[Kafka07Request], object], principal: str,
               host: str):
        def may(operation: Operation, resource_type: ResourceType, name: str) -> bool:
            return self.authorizer.authorize(principal, host, operation, resource_type, name)

        def require(allowed: bool, what: str) -> None:
            if not allowed:
                raise CloseConnection(f"{what} by {principal} refused: not authorized")

        kind = type(request)
        if kind is ProduceRequest:
            require(may(Operation.WRITE, ResourceType.TOPIC, request.topic), f"produce to {request.topic!r}")
        elif kind is MultiProduceRequest or kind is ProduceAckRequest:
            produces = request.produces if kind is MultiProduceRequest else request.produce.produces
            for part in produces:
                require(may(Operation.WRITE, ResourceType.TOPIC, part.topic), f"produce to {part.topic!r}")
        elif kind is FetchRequest:
            if not may(Operation.READ, ResourceType.TOPIC, request.topic):
                return [REFUSED_FETCH]
        elif kind is MultiFetchRequest:
            refused = [not may(Operation.READ, ResourceType.TOPIC, f.topic) for f in request.fetches]
            if any(refused):
                return _multifetch(request, refused, serve)
        elif kind is OffsetRequest:
            if not may(Operation.DESCRIBE, ResourceType.TOPIC, request.topic):
                return [REFUSED_OFFSETS]
        elif kind is ReplicaFetchRequest or kind is EpochEndOffsetRequest:
            require(may(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME), "a replica's fetch")
        elif kind is MetadataRequest:
            for topic in request.topics:
                require(may(Operation.DESCRIBE, ResourceType.TOPIC, topic), f"metadata of {topic!r}")
        else:  # a request type nobody checked: a bug, not a peer's mistake
            raise TypeError(f"no authorization check for {kind.__name__}")
        return serve(request)


def _multifetch(request: MultiFetchRequest, refused: list[bool], serve) -> list[Piece]:
    """A MultiFetch answer with the refused fetches' parts saying 29: each part is laid out as
    a single fetch's whole answer (size, error, set), so the allowed ones are served as such."""
    parts: list[Piece] = []
    for fetch, no in zip(request.fetches, refused):
        parts.extend([REFUSED_FETCH] if no else serve(fetch))
    total = sum(piece.length if isinstance(piece, FileRegion) else len(piece) for piece in parts)
    return [encode_response_header(NO_ERROR, total), *parts]
