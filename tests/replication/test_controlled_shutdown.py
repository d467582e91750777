"""SIGTERM of a leader runs a controlled shutdown: the controller moves its leaderships while
the broker still holds its ZooKeeper session and serves, so a write in flight is answered by
the old leader or refused before it is appended, never appended and then answered with an
error (which a retrying producer turns into a duplicate)."""

import signal

from tests.support.replicated_cluster import Wire


def test_sigterm_moves_leaderships_before_the_session_closes(three_brokers):
    cluster = three_brokers
    metadata = cluster.create("cs")
    leader = metadata.partitions[0].leader
    with Wire(cluster.brokers[leader]) as wire:
        assert wire.produce("cs", 0, [b"before"])[0] == 0
    cluster.brokers[leader].process.send_signal(signal.SIGTERM)
    cluster.brokers[leader].process.wait(20)
    log = cluster.brokers[leader].log_tail(1 << 20)
    assert "controlled shutdown failed" not in log
    assert "controlled shutdown: leaderships moved away" in log
