"""log.visibility on a 0.7 topic: flushed (0.7's rule, the default) keeps a message from
consumers until its fsync; committed shows it at once (docs/replication.md §6)."""

from __future__ import annotations

import struct

from twisted_broker.codec.kafka07.message_set import encode_message_set, valid_bytes
from twisted_broker.codec.kafka07.requests import FetchRequest, ProduceRequest, encode_request

NO_FLUSH = {"log.flush.interval": "1000000", "log.default.flush.interval.ms": "600000",
            "log.default.flush.scheduler.interval.ms": "600000"}


def produce_then_fetch(broker) -> int:
    """Bytes a fetch finds right after a produce on the same connection."""
    with broker.connect() as client:
        client.send(encode_request(ProduceRequest("v", 0, encode_message_set([b"hello"]))))
        body = client.request(encode_request(FetchRequest("v", 0, 0, 1 << 20)))
    assert struct.unpack(">h", body[:2]) == (0,)
    return valid_bytes(body[2:])


def test_by_default_an_unflushed_message_stays_invisible(broker_factory):
    assert produce_then_fetch(broker_factory(properties=NO_FLUSH)) == 0


def test_committed_visibility_shows_a_0_7_message_before_its_flush(broker_factory):
    broker = broker_factory(properties={**NO_FLUSH, "log.visibility": "committed"})
    assert produce_then_fetch(broker) == len(encode_message_set([b"hello"]))
