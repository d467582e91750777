"""FindCoordinator and the consumer-group APIs of the modern listener (MODERN.md D4).

The coordinator of every group is the controller broker (with ZooKeeper; this broker
without): FindCoordinator names it, and any other broker answers group requests with
NOT_COORDINATOR (16), so a client that asked before a controller change finds the new one.
"""

from __future__ import annotations

from twisted.internet.defer import inlineCallbacks

from twisted_broker.kafka_wire import errors as kafka_errors
from twisted_broker.kafka_wire.protocol import Request
from twisted_broker.server.modern_metadata import TopicRequests

GROUP_KEY = 0  # FindCoordinator key_type: 1 is a transactional id (no transactions here)


class GroupRequests:
    def __init__(self, topics: TopicRequests) -> None:
        self.topics = topics
        self.view = topics.view

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
        brokers = yield self.view.brokers()
        if coordinator not in brokers:  # no controller now, or one without this listener
            answer.update(error_code=kafka_errors.COORDINATOR_NOT_AVAILABLE,
                          error_message=kafka_errors.error_name(kafka_errors.COORDINATOR_NOT_AVAILABLE))
            return answer
        host, port = brokers[coordinator]
        answer.update(node_id=coordinator, host=host, port=port)
        return answer
