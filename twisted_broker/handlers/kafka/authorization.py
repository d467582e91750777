"""The authorizer's checks on every API of the modern listener (docs/security.md's table).

``authorized_handlers`` wraps the handler table: each api key's check runs before its
handler, which sees only what the principal may touch, so nothing refused is ever written,
created, deleted or joined; the refused parts are then added to the handler's answer with
Kafka's codes (29 topic, 30 group, 31 cluster). A request with nothing refused goes to its
handler untouched: the checks cost one cached decision per topic (security/authorizer.py).
With the authorizer off, tap.py does not wrap the table at all.

One helper serves every API that names topics (``_by_topic``): which of the request's topics
the principal may act on, the request without the others, the others' answers per partition.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from twisted.internet.defer import Deferred

from twisted_broker.codec.kafka import api_keys
from twisted_broker.codec.kafka import errors as kafka_errors
from twisted_broker.codec.kafka.batch_header import BatchHeaderError, read_header
from twisted_broker.codec.kafka.protocol import Request, WithRecords
from twisted_broker.errors import CloseConnection
from twisted_broker.security.acl import CLUSTER_NAME, Operation, ResourceType
from twisted_broker.security.authorizer import AclAuthorizer


_Handler = Callable[[Request], object]  # handlers/kafka/table.py's Handler


def _unchecked(request: Request, handler: _Handler):
    return handler(request)

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TOPIC_REFUSED = kafka_errors.TOPIC_AUTHORIZATION_FAILED
GROUP_REFUSED = kafka_errors.GROUP_AUTHORIZATION_FAILED
CLUSTER_REFUSED = kafka_errors.CLUSTER_AUTHORIZATION_FAILED


@dataclass(frozen=True)
class TopicLayout:
    """Where an API's request and answer keep their topics and partitions."""

    asked: str  # the request's topic list
    name: str  # a requested topic's name
    parts: str  # its partition list
    index: str | None  # a requested partition's number (None: the list holds the numbers)
    answered: str  # the answer's topic list
    answered_name: str
    answered_parts: str
    answer_index: str  # an answered partition's number
    refused: dict  # a refused partition's other fields
    empty: dict  # the whole answer when no topic is left


PRODUCE_TOPICS = TopicLayout("topic_data", "name", "partition_data", "index", "responses", "name",
                             "partition_responses", "index",
                             {"base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1},
                             {"responses": [], "throttle_time_ms": 0})
FETCH_TOPICS = TopicLayout("topics", "topic", "partitions", "partition", "responses", "topic", "partitions",
                    "partition_index", {"high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
                                        "aborted_transactions": None, "records": b""},
                    {"throttle_time_ms": 0, "error_code": kafka_errors.NONE, "session_id": 0, "responses": []})
LIST_OFFSETS_TOPICS = TopicLayout("topics", "name", "partitions", "partition_index", "topics", "name", "partitions",
                           "partition_index", {"timestamp": -1, "offset": -1, "leader_epoch": -1},
                           {"throttle_time_ms": 0, "topics": []})
OFFSET_COMMIT_TOPICS = TopicLayout("topics", "name", "partitions", "partition_index", "topics", "name", "partitions",
                            "partition_index", {}, {"throttle_time_ms": 0, "topics": []})
OFFSET_FETCH_TOPICS = TopicLayout("topics", "name", "partition_indexes", None, "topics", "name", "partitions",
                           "partition_index", {"committed_offset": -1, "committed_leader_epoch": -1, "metadata": None},
                           {"throttle_time_ms": 0, "error_code": kafka_errors.NONE, "topics": []})

# Whole answers of the group APIs refused, by api key.
GROUP_REFUSALS = {
    api_keys.JOIN_GROUP: {"throttle_time_ms": 0, "error_code": GROUP_REFUSED, "generation_id": -1,
                          "protocol_name": "", "leader": "", "member_id": "", "members": []},
    api_keys.SYNC_GROUP: {"throttle_time_ms": 0, "error_code": GROUP_REFUSED, "assignment": b""},
    api_keys.HEARTBEAT: {"throttle_time_ms": 0, "error_code": GROUP_REFUSED},
    api_keys.LEAVE_GROUP: {"throttle_time_ms": 0, "error_code": GROUP_REFUSED},
    api_keys.FIND_COORDINATOR: {"throttle_time_ms": 0, "error_code": GROUP_REFUSED,
                                "error_message": "GROUP_AUTHORIZATION_FAILED", "node_id": -1, "host": "", "port": -1},
}


def _then(answer, add: Callable[[dict], object]):
    """Call ``add`` on the answer's body, now or when its Deferred fires; the same answer
    object is returned (a Produce's Deferred keeps its ``writes_done``)."""
    if isinstance(answer, Deferred):
        def added(ready):
            add(ready.body if isinstance(ready, WithRecords) else ready)
            return ready
        return answer.addCallback(added)
    add(answer.body if isinstance(answer, WithRecords) else answer)
    return answer


def has_idempotent_batches(topic_data: list) -> bool:
    """Does any partition's record set start with a batch carrying a producer id?"""
    for topic in topic_data:
        for part in topic["partition_data"]:
            try:
                if read_header(part["records"]).producer_id >= 0:
                    return True
            except (BatchHeaderError, ValueError):  # older message sets: no producer ids
                continue
    return False


class Authorization:
    """The checks of one broker's modern listener against ``authorizer``."""

    def __init__(self, authorizer: AclAuthorizer) -> None:
        self.authorizer = authorizer

    def may(self, request: Request, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        host = request.client_host[1:] if request.client_host.startswith("/") else request.client_host
        return self.authorizer.authorize(request.principal, host, operation, resource_type, name)

    def may_create_topic(self, request: Request, name: str) -> bool:
        return self.may(request, Operation.CREATE, CLUSTER, CLUSTER_NAME) or \
            self.may(request, Operation.CREATE, TOPIC, name)

    def wrap(self, handlers: dict[int, _Handler]) -> dict[int, _Handler]:
        """The table with each api key's check before its handler. ApiVersions and the SASL
        APIs are checked by nothing, as in Kafka: they come before anyone is known (and in the
        table they only answer ILLEGAL_SASL_STATE, handlers/kafka/sasl.py)."""
        checks = {
            api_keys.SASL_HANDSHAKE: _unchecked,
            api_keys.SASL_AUTHENTICATE: _unchecked,
            api_keys.PRODUCE: self._produce,
            api_keys.INIT_PRODUCER_ID: self._cluster_check(Operation.IDEMPOTENT_WRITE, lambda request: {
                "throttle_time_ms": 0, "error_code": CLUSTER_REFUSED, "producer_id": -1, "producer_epoch": -1}),
            api_keys.FETCH: self._fetch,
            api_keys.LIST_OFFSETS: self._topics(LIST_OFFSETS_TOPICS, Operation.DESCRIBE),
            api_keys.METADATA: self._metadata,
            api_keys.CREATE_TOPICS: self._create_topics,
            api_keys.DELETE_TOPICS: self._delete_topics,
            api_keys.FIND_COORDINATOR: self._group(Operation.DESCRIBE, "key"),
            api_keys.JOIN_GROUP: self._group(Operation.READ),
            api_keys.SYNC_GROUP: self._group(Operation.READ),
            api_keys.HEARTBEAT: self._group(Operation.READ),
            api_keys.LEAVE_GROUP: self._group(Operation.READ),
            api_keys.OFFSET_COMMIT: self._offset_commit,
            api_keys.OFFSET_FETCH: self._offset_fetch,
            api_keys.DESCRIBE_GROUPS: self._describe_groups,
            api_keys.LIST_GROUPS: self._list_groups,
            api_keys.DESCRIBE_ACLS: self._cluster_check(Operation.DESCRIBE, lambda request: {
                "throttle_time_ms": 0, "error_code": CLUSTER_REFUSED, "error_message": "CLUSTER_AUTHORIZATION_FAILED",
                "resources": []}),
            api_keys.CREATE_ACLS: self._cluster_check(Operation.ALTER, lambda request: {
                "throttle_time_ms": 0, "results": [{"error_code": CLUSTER_REFUSED, "error_message": None}
                                                   for _ in request.body["creations"]]}),
            api_keys.DELETE_ACLS: self._cluster_check(Operation.ALTER, lambda request: {
                "throttle_time_ms": 0, "filter_results": [
                    {"error_code": CLUSTER_REFUSED, "error_message": None, "matching_acls": []}
                    for _ in request.body["filters"]]}),
        }
        missing = set(handlers) - set(checks)
        if missing:  # every API must say what it checks: a new one without a check is a bug
            raise ValueError(f"api keys without an authorization check: {sorted(missing)}")
        return {key: (lambda request, check=checks[key], handler=handler: check(request, handler))
                for key, handler in handlers.items()}

    # -- the helper every topic-naming API uses ------------------------------------------------

    def _by_topic(self, request: Request, handler: _Handler, layout: TopicLayout, operation: Operation,
                  code: int = TOPIC_REFUSED, refuse_all: bool = False):
        topics = request.body[layout.asked]
        refused = topics if refuse_all else [
            topic for topic in topics if not self.may(request, operation, TOPIC, topic[layout.name])]
        if not refused:
            return handler(request)
        answers = [{layout.answered_name: topic[layout.name], layout.answered_parts: [
            {**layout.refused, layout.answer_index: part[layout.index] if layout.index else part, "error_code": code}
            for part in topic[layout.parts]]} for topic in refused]
        refused_ids = {id(topic) for topic in refused}
        kept = [topic for topic in topics if id(topic) not in refused_ids]
        if kept:
            answer = handler(replace(request, body={**request.body, layout.asked: kept}))
        else:
            answer = {**layout.empty, layout.answered: []}
        return _then(answer, lambda body: body[layout.answered].extend(answers))

    def _topics(self, layout: TopicLayout, operation: Operation):
        return lambda request, handler: self._by_topic(request, handler, layout, operation)

    def _cluster_check(self, operation: Operation, refusal: Callable[[Request], dict]):
        def check(request: Request, handler: _Handler):
            if self.may(request, operation, CLUSTER, CLUSTER_NAME):
                return handler(request)
            return refusal(request)
        return check

    def _group(self, operation: Operation, field: str = "group_id"):
        def check(request: Request, handler: _Handler):
            if self.may(request, operation, GROUP, request.body[field]):
                return handler(request)
            return dict(GROUP_REFUSALS[request.api_key])
        return check

    # -- APIs with more to them ----------------------------------------------------------------

    def _produce(self, request: Request, handler: _Handler):
        body = request.body
        idempotent_refused = has_idempotent_batches(body["topic_data"]) and not self.may(
            request, Operation.IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME)
        if body["acks"] == 0 and (idempotent_refused or any(
                not self.may(request, Operation.WRITE, TOPIC, topic["name"]) for topic in body["topic_data"])):
            # No answer to carry the refusal: Kafka closes the connection, so the client learns.
            raise CloseConnection(f"produce (acks=0) by {request.principal} refused: not authorized")
        if idempotent_refused:
            return self._by_topic(request, handler, PRODUCE_TOPICS, Operation.WRITE, CLUSTER_REFUSED, refuse_all=True)
        return self._by_topic(request, handler, PRODUCE_TOPICS, Operation.WRITE)

    def _fetch(self, request: Request, handler: _Handler):
        if request.body.get("replica_id", -1) >= 0:  # a follower's: the cluster's business
            if self.may(request, Operation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME):
                return handler(request)
            return self._by_topic(request, handler, FETCH_TOPICS, Operation.READ, CLUSTER_REFUSED, refuse_all=True)
        return self._by_topic(request, handler, FETCH_TOPICS, Operation.READ)

    def _metadata(self, request: Request, handler: _Handler):
        named = request.body["topics"]
        every_topic = named is None or (request.api_version == 0 and not named)

        def leave_out(body: dict) -> None:
            topics = []
            for topic in body["topics"]:
                if self.may(request, Operation.DESCRIBE, TOPIC, topic["name"]):
                    topics.append(topic)
                elif not every_topic:
                    topics.append({"error_code": TOPIC_REFUSED, "name": topic["name"], "is_internal": False,
                                   "partitions": []})
            body["topics"] = topics
        return _then(handler(request), leave_out)

    def _create_topics(self, request: Request, handler: _Handler):
        topics = request.body["topics"]
        refused = [t for t in topics if not self.may_create_topic(request, t["name"])]
        if not refused:
            return handler(request)
        answers = [{"name": t["name"], "error_code": TOPIC_REFUSED, "error_message": "TOPIC_AUTHORIZATION_FAILED"}
                   for t in refused]
        kept = [t for t in topics if t not in refused]
        answer = handler(replace(request, body={**request.body, "topics": kept})) if kept else \
            {"throttle_time_ms": 0, "topics": []}
        return _then(answer, lambda body: body["topics"].extend(answers))

    def _delete_topics(self, request: Request, handler: _Handler):
        names = request.body["topic_names"]
        refused = [name for name in names if not self.may(request, Operation.DELETE, TOPIC, name)]
        if not refused:
            return handler(request)
        kept = [name for name in names if name not in refused]
        answer = handler(replace(request, body={**request.body, "topic_names": kept})) if kept else \
            {"throttle_time_ms": 0, "responses": []}
        return _then(answer, lambda body: body["responses"].extend(
            {"name": name, "error_code": TOPIC_REFUSED} for name in refused))

    def _offset_commit(self, request: Request, handler: _Handler):
        group_refused = not self.may(request, Operation.READ, GROUP, request.body["group_id"])
        return self._by_topic(request, handler, OFFSET_COMMIT_TOPICS, Operation.READ,
                              GROUP_REFUSED if group_refused else TOPIC_REFUSED, refuse_all=group_refused)

    def _offset_fetch(self, request: Request, handler: _Handler):
        if not self.may(request, Operation.DESCRIBE, GROUP, request.body["group_id"]):
            answer = {**OFFSET_FETCH_TOPICS.empty, "error_code": GROUP_REFUSED, "topics": []}
            if request.body["topics"] is not None:  # v1 has no top-level error: per partition too
                answer["topics"] = [{"name": t["name"], "partitions": [
                    {**OFFSET_FETCH_TOPICS.refused, "partition_index": p, "error_code": GROUP_REFUSED}
                    for p in t["partition_indexes"]]} for t in request.body["topics"]]
            return answer
        if request.body["topics"] is not None:
            return self._by_topic(request, handler, OFFSET_FETCH_TOPICS, Operation.DESCRIBE)

        def leave_out(body: dict) -> None:
            body["topics"] = [t for t in body["topics"] if self.may(request, Operation.DESCRIBE, TOPIC, t["name"])]
        return _then(handler(request), leave_out)

    def _describe_groups(self, request: Request, handler: _Handler):
        groups = request.body["groups"]
        refused = [g for g in groups if not self.may(request, Operation.DESCRIBE, GROUP, g)]
        if not refused:
            return handler(request)
        kept = [g for g in groups if g not in refused]
        answer = handler(replace(request, body={"groups": kept})) if kept else {"throttle_time_ms": 0, "groups": []}
        return _then(answer, lambda body: body["groups"].extend(
            {"error_code": GROUP_REFUSED, "group_id": g, "group_state": "", "protocol_type": "", "protocol_data": "",
             "members": []} for g in refused))

    def _list_groups(self, request: Request, handler: _Handler):
        if self.may(request, Operation.DESCRIBE, CLUSTER, CLUSTER_NAME):
            return handler(request)

        def leave_out(body: dict) -> None:
            body["groups"] = [g for g in body["groups"] if self.may(request, Operation.DESCRIBE, GROUP, g["group_id"])]
        return _then(handler(request), leave_out)
