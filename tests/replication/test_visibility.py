"""log.visibility=flushed on a replicated topic: the high watermark counts what every in-sync
replica has fsynced, so a write is acknowledged (acks=all) and visible only after the fsyncs."""

from tests.support.replicated_cluster import Wire, produce_once_led

REQUEST_TIMED_OUT = 7


def start(cluster, **properties):
    cluster.properties.update({"log.visibility": "flushed", **properties})
    for broker_id in range(3):
        cluster.start(broker_id)
    cluster.wait_until_all_see_each_other()
    return cluster.leaders("v")[0]


def test_without_fsyncs_nothing_is_committed_under_flushed_visibility(replicated_cluster):
    leader = start(replicated_cluster, **{"log.flush.interval": "1000000", "log.default.flush.interval.ms": "600000",
                                          "log.default.flush.scheduler.interval.ms": "600000"})
    with Wire(replicated_cluster.brokers[leader]) as wire:
        assert produce_once_led(wire, "v", 0, [b"unflushed"], timeout_ms=1000)[0] == REQUEST_TIMED_OUT
        assert wire.read_all("v", 0) == []


def test_fsynced_on_every_replica_a_write_is_acknowledged_and_visible(replicated_cluster):
    leader = start(replicated_cluster, **{"log.flush.interval": "1"})
    with Wire(replicated_cluster.brokers[leader]) as wire:
        assert produce_once_led(wire, "v", 0, [b"flushed"], timeout_ms=10_000)[0] == 0
        assert [p for _, p in wire.read_all("v", 0)] == [b"flushed"]
