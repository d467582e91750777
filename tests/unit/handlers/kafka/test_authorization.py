"""The modern listener's ACL checks around stand-in handlers: what reaches the handler, what
the answer says (no sockets, no ZooKeeper)."""

from __future__ import annotations

import pytest
from twisted.internet.defer import succeed

from twisted_broker.codec.kafka import api_keys
from twisted_broker.codec.kafka.protocol import Request
from twisted_broker.errors import CloseConnection
from twisted_broker.handlers.kafka.authorization import Authorization
from twisted_broker.security.acl import AclEntry, Operation, PatternType, Permission, ResourcePattern, ResourceType
from twisted_broker.security.authorizer import AclAuthorizer

ME = "User:me"


def authorization(**allowed) -> Authorization:
    """``topic_NAME=[ops]``, ``group_NAME=[ops]``, ``cluster=[ops]``: Allows for ME."""
    acls = {}
    for key, operations in allowed.items():
        kind, _, name = key.partition("_")
        rtype = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP, "cluster": ResourceType.CLUSTER}[kind]
        acls[ResourcePattern(rtype, name or "kafka-cluster", PatternType.LITERAL)] = [
            AclEntry(ME, "*", op, Permission.ALLOW) for op in operations]
    authorizer = AclAuthorizer()
    authorizer.load(acls)
    return Authorization(authorizer)


def request(api_key: int, body: dict, version: int = 1) -> Request:
    return Request(api_key, version, 7, "c", body, client_host="/10.0.0.1", principal=ME)


def test_produce_hands_on_only_allowed_topics_and_answers_29_for_the_rest():
    seen = []

    def produce(req):
        seen.append([t["name"] for t in req.body["topic_data"]])
        return succeed({"responses": [{"name": "ok", "partition_responses": [{"index": 0, "error_code": 0}]}]})
    table = authorization(topic_ok=[Operation.WRITE]).wrap({api_keys.PRODUCE: produce})
    body = {"acks": 1, "timeout_ms": 1, "topic_data": [
        {"name": "ok", "partition_data": [{"index": 0, "records": b""}]},
        {"name": "no", "partition_data": [{"index": 0, "records": b""}, {"index": 1, "records": b""}]}]}
    answer = table[api_keys.PRODUCE](request(api_keys.PRODUCE, body)).result
    assert seen == [["ok"]]
    refused = [t for t in answer["responses"] if t["name"] == "no"][0]["partition_responses"]
    assert [(p["index"], p["error_code"]) for p in refused] == [(0, 29), (1, 29)]


def test_produce_with_acks_0_refused_closes_the_connection():
    table = authorization().wrap({api_keys.PRODUCE: lambda req: None})
    body = {"acks": 0, "timeout_ms": 1, "topic_data": [{"name": "no", "partition_data": []}]}
    with pytest.raises(CloseConnection):
        table[api_keys.PRODUCE](request(api_keys.PRODUCE, body))


def test_metadata_leaves_out_undescribed_topics_of_all_and_refuses_named_ones():
    answer = {"topics": [{"error_code": 0, "name": "seen", "partitions": []},
                         {"error_code": 0, "name": "hidden", "partitions": []}]}
    auth = authorization(topic_seen=[Operation.READ])
    table = auth.wrap({api_keys.METADATA: lambda req: {"topics": [dict(t) for t in answer["topics"]]}})
    every = table[api_keys.METADATA](request(api_keys.METADATA, {"topics": None}))
    assert [t["name"] for t in every["topics"]] == ["seen"]
    named = table[api_keys.METADATA](request(api_keys.METADATA, {"topics": [{"name": "seen"}, {"name": "hidden"}]}))
    assert [(t["name"], t["error_code"]) for t in named["topics"]] == [("seen", 0), ("hidden", 29)]


def test_group_apis_without_read_answer_30_without_calling_the_handler():
    table = authorization(group_mine=[Operation.READ]).wrap({api_keys.HEARTBEAT: lambda req: {"error_code": 0}})
    heartbeat = table[api_keys.HEARTBEAT]
    assert heartbeat(request(api_keys.HEARTBEAT, {"group_id": "mine"}))["error_code"] == 0
    assert heartbeat(request(api_keys.HEARTBEAT, {"group_id": "theirs"}))["error_code"] == 30


def test_init_producer_id_needs_idempotent_write_on_the_cluster():
    handlers = {api_keys.INIT_PRODUCER_ID: lambda req: {"error_code": 0}}
    init = authorization().wrap(handlers)[api_keys.INIT_PRODUCER_ID]
    assert init(request(api_keys.INIT_PRODUCER_ID, {"transactional_id": None}))["error_code"] == 31
    init = authorization(cluster=[Operation.IDEMPOTENT_WRITE]).wrap(handlers)[api_keys.INIT_PRODUCER_ID]
    assert init(request(api_keys.INIT_PRODUCER_ID, {"transactional_id": None}))["error_code"] == 0


def test_an_api_without_a_check_is_refused_at_start():
    with pytest.raises(ValueError):
        authorization().wrap({999: lambda req: None})


def test_the_sasl_apis_need_no_right_so_a_sasl_listener_starts_with_the_authorizer():
    # A table with the SASL APIs (a broker with a SASL listener) was refused at start.
    sasl = {api_keys.SASL_HANDSHAKE: lambda req: {"error_code": 34},
            api_keys.SASL_AUTHENTICATE: lambda req: {"error_code": 34}}
    table = authorization().wrap(sasl)
    assert table[api_keys.SASL_HANDSHAKE](request(api_keys.SASL_HANDSHAKE, {"mechanism": "PLAIN"}))["error_code"] == 34
    assert table[api_keys.SASL_AUTHENTICATE](request(api_keys.SASL_AUTHENTICATE, {}))["error_code"] == 34
