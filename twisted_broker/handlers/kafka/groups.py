"""FindCoordinator and the consumer-group APIs of the modern listener (docs/kafka-protocol.md §5):
the wire's fields to and from the group coordinator (coordinator/group/coordinator.py).

The coordinator of every group is the controller broker (with ZooKeeper; this broker
without): FindCoordinator names it, and the coordinator answers group requests on any other
broker with NOT_COORDINATOR (16), so a client that asked before a controller change finds
the new one. Committed offsets name partitions as 0.7's group consumers do
(``KafkaClusterView.partition_names``).
"""

from __future__ import annotations

from twisted.internet.defer import inlineCallbacks

from twisted_broker.coordinator.group.coordinator import GroupCoordinator
from twisted_broker.coordinator.group.messages import FetchedOffset, JoinRequest, OffsetCommit
from twisted_broker.codec.kafka import errors as kafka_errors
from twisted_broker.codec.kafka.group_schemas import GROUP_KEY
from twisted_broker.codec.kafka.protocol import Request
from twisted_broker.handlers.kafka.metadata import TopicRequests



class GroupRequests:
    def __init__(self, topics: TopicRequests, coordinator: GroupCoordinator) -> None:
        self.topics = topics
        self.view = topics.view
        self.coordinator = coordinator

    def is_coordinator(self) -> bool:
        return self.view.controller_id() == self.view.broker_id

    @inlineCallbacks
    def find_coordinator(self, request: Request):
        body = request.body
        answer = {"throttle_time_ms": 0, "error_code": kafka_errors.NONE, "error_message": None,
                  "node_id": -1, "host": "", "port": -1}
        if body.get("key_type", GROUP_KEY) != GROUP_KEY:
            answer.update(error_code=kafka_errors.COORDINATOR_NOT_AVAILABLE, error_message="no transactions")
            return answer
        yield self.topics.wait_for_cluster()
        coordinator = self.view.controller_id()
        brokers = yield self.view.brokers(request.listener)
        if coordinator not in brokers:  # no controller now, or one without this listener
            answer.update(error_code=kafka_errors.COORDINATOR_NOT_AVAILABLE,
                          error_message=kafka_errors.error_name(kafka_errors.COORDINATOR_NOT_AVAILABLE))
            return answer
        host, port = brokers[coordinator]
        answer.update(node_id=coordinator, host=host, port=port)
        return answer

    # -- membership ----------------------------------------------------------------------------

    @inlineCallbacks
    def join_group(self, request: Request):
        body = request.body
        result = yield self.coordinator.join_group(body["group_id"], JoinRequest(
            member_id=body["member_id"], client_id=request.client_id or "", client_host=request.client_host,
            session_timeout_ms=body["session_timeout_ms"],
            rebalance_timeout_ms=body.get("rebalance_timeout_ms", body["session_timeout_ms"]),
            protocol_type=body["protocol_type"],
            protocols=tuple((p["name"], bytes(p["metadata"])) for p in body["protocols"])))
        return {"throttle_time_ms": 0, "error_code": result.error, "generation_id": result.generation,
                "protocol_name": result.protocol, "leader": result.leader_id, "member_id": result.member_id,
                "members": [{"member_id": member, "metadata": metadata} for member, metadata in result.members]}

    @inlineCallbacks
    def sync_group(self, request: Request):
        body = request.body
        result = yield self.coordinator.sync_group(
            body["group_id"], body["member_id"], body["generation_id"],
            {a["member_id"]: bytes(a["assignment"]) for a in body["assignments"]})
        return {"throttle_time_ms": 0, "error_code": result.error, "assignment": result.assignment}

    def heartbeat(self, request: Request) -> dict:
        body = request.body
        error = self.coordinator.heartbeat(body["group_id"], body["member_id"], body["generation_id"])
        return {"throttle_time_ms": 0, "error_code": error}

    def leave_group(self, request: Request) -> dict:
        body = request.body
        return {"throttle_time_ms": 0, "error_code": self.coordinator.leave_group(body["group_id"], body["member_id"])}

    # -- offsets -------------------------------------------------------------------------------

    @inlineCallbacks
    def offset_commit(self, request: Request):
        body = request.body
        results = yield self.coordinator.commit_offsets(
            body["group_id"], body["member_id"], body["generation_id"],
            [OffsetCommit(topic["name"], p["partition_index"], p["committed_offset"], p["committed_metadata"] or "")
             for topic in body["topics"] for p in topic["partitions"]])
        return {"throttle_time_ms": 0, "topics": [
            {"name": topic["name"], "partitions": [
                {"partition_index": p["partition_index"], "error_code": results[topic["name"], p["partition_index"]]}
                for p in topic["partitions"]]}
            for topic in body["topics"]]}

    @inlineCallbacks
    def offset_fetch(self, request: Request):
        body = request.body
        asked = None
        if body["topics"] is not None:
            asked = [(topic["name"], p) for topic in body["topics"] for p in topic["partition_indexes"]]
        result = yield self.coordinator.fetch_offsets(body["group_id"], asked)
        rows = result.offsets
        if result.error:  # each partition asked carries it too (v1 has no top-level error)
            rows = {key: FetchedOffset(-1, "", result.error) for key in asked or ()}
        by_topic: dict[str, list] = {}
        for (topic, partition), found in rows.items():
            by_topic.setdefault(topic, []).append({
                "partition_index": partition, "committed_offset": found.offset, "committed_leader_epoch": -1,
                "metadata": found.metadata, "error_code": found.error})
        return {"throttle_time_ms": 0, "error_code": result.error,
                "topics": [{"name": topic, "partitions": parts} for topic, parts in by_topic.items()]}

    # -- listing -------------------------------------------------------------------------------

    @inlineCallbacks
    def describe_groups(self, request: Request):
        descriptions = yield self.coordinator.describe_groups(request.body["groups"])
        return {"throttle_time_ms": 0, "groups": [
            {"error_code": d.error, "group_id": d.group_id, "group_state": d.state, "protocol_type": d.protocol_type,
             "protocol_data": d.protocol,
             "members": [{"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host,
                          "member_metadata": m.metadata, "member_assignment": m.assignment} for m in d.members]}
            for d in descriptions]}

    @inlineCallbacks
    def list_groups(self, request: Request):
        result = yield self.coordinator.list_groups()
        return {"throttle_time_ms": 0, "error_code": result.error,
                "groups": [{"group_id": group, "protocol_type": kind} for group, kind in result.groups]}
