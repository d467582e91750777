"""A broker that has not read replication's state yet never takes a write as a 0.7 topic's
(found by `make nemesis`, seed 6: a broker restarted after its disk filled acknowledged acks=-1
writes to its replica's log as if the topic were a 0.7 one, before it had read ZooKeeper; the
leader's copy then overwrote them: 40 acknowledged messages lost).

The window is made wide and certain: the follower is restarted with a ZooKeeper address where
nothing answers, so it serves without ever reading replication's state.
"""

from __future__ import annotations

from tests.support.brokers import BrokerProcess
from tests.support.replicated_cluster import Wire, produce_all, segment_bytes
from twisted_broker.codec.kafka07.message_set import encode_message_set
from twisted_broker.codec.kafka07.replication_errors import NotLeaderForPartition
from twisted_broker.codec.kafka07.requests import ProduceRequest, encode_request

TOPIC = "restarted"


def test_a_broker_that_has_not_read_zookeeper_takes_no_write_to_a_replica_or_an_unknown_topic(three_brokers):
    cluster = three_brokers
    cluster.create(TOPIC)
    produce_all(cluster, TOPIC, 0, [b"committed-%d" % i for i in range(10)])
    follower = next(b for b in (0, 1, 2) if b != cluster.leaders(TOPIC)[0])
    cluster.wait_for(lambda: segment_bytes(cluster.brokers[follower], TOPIC, 0)
                     == segment_bytes(cluster.brokers[cluster.leaders(TOPIC)[0]], TOPIC, 0), what="the follower's copy")
    cluster.brokers[follower].kill()
    before = segment_bytes(cluster.brokers[follower], TOPIC, 0)

    # The same broker id, log dir and settings, but a ZooKeeper nobody answers at.
    properties = {**cluster.properties, "zk.connectiontimeout.ms": "500"}
    cut_off = BrokerProcess(cluster.brokers[follower].directory, broker_id=follower,
                            zk_connect="127.0.0.1:1", properties=properties).start()
    try:
        with Wire(cut_off) as wire:
            error, offset = wire.produce(TOPIC, 0, [b"not-here"], acks=-1)
            assert (error, offset) == (NotLeaderForPartition.code, -1)
            error, offset = wire.produce("never-seen", 0, [b"not-yet"], acks=1)
            assert (error, offset) == (NotLeaderForPartition.code, -1)
        with cut_off.connect() as client:  # 0.7's produce: refused by closing the connection
            client.send(encode_request(ProduceRequest(TOPIC, 0, encode_message_set([b"plain-0.7"]))))
            assert client.is_closed_by_peer()
        assert segment_bytes(cut_off, TOPIC, 0) == before
    finally:
        cut_off.kill()
