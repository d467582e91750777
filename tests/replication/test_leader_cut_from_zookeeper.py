"""A leader cut off from ZooKeeper while its clients still reach it, on three real brokers.

Each broker reaches ZooKeeper through a proxy of its own (tcp_proxy.py); the test blackholes
the leader's. The leader must fence itself as soon as its connection is suspended (writes
refused with error 6, nothing more committed), the controller elects another leader once the
session has expired, nothing the cut-off leader acknowledged is lost, nothing it was sent after
fencing ever appears, and once the proxy heals the old leader follows the new one until its
copy is byte-identical.
"""

import time

import pytest

from tests.support.brokers import BrokerProcess
from tests.support.faults.tcp_proxy import BlackholeProxy
from tests.support.faults.traffic import LeaderConsumer, LeaderProducer, Leaders, check_history
from tests.support.reliability import record, record_durations
from tests.support.replicated_cluster import FAST, ReplicatedCluster, Wire, all_in_sync, segment_bytes
from tests.support.zookeeper import new_chroot
from twisted_broker.codec.kafka07.message_set import encode_message_set
from twisted_broker.codec.kafka07.replication import ProduceAckRequest, encode_replication_request
from twisted_broker.codec.kafka07.requests import MultiProduceRequest, ProduceRequest

SESSION_TIMEOUT_S = 2.0
NOT_LEADER = 6
TOPIC = "cut"


@pytest.fixture
def proxied_cluster(zookeeper, tmp_path):  # noqa: F811 (the session's ZooKeeper)
    """Three brokers, each with its own proxy to ZooKeeper: (cluster, {broker id: proxy})."""
    connect = new_chroot(zookeeper)
    chroot = connect[connect.index("/"):]
    cluster = ReplicatedCluster(tmp_path, connect, dict(FAST))
    proxies = {}
    try:
        for broker_id in range(3):
            proxies[broker_id] = BlackholeProxy((zookeeper.host, zookeeper.port))
            cluster.brokers[broker_id] = BrokerProcess(
                tmp_path / f"broker-{broker_id}", broker_id=broker_id,
                zk_connect=proxies[broker_id].connect_string + chroot, properties=cluster.properties)
            cluster.start(broker_id)
        yield cluster, proxies
    finally:
        cluster.stop_all()
        for proxy in proxies.values():
            proxy.close()


def test_a_leader_cut_from_zookeeper_is_fenced_and_replaced_and_rejoins_identical(proxied_cluster, request):
    cluster, proxies = proxied_cluster
    metadata = cluster.create(TOPIC)
    old = metadata.partitions[0].leader
    others = [b for b in (0, 1, 2) if b != old]
    leaders = Leaders(lambda: [("127.0.0.1", cluster.brokers[b].port) for b in others], TOPIC)
    pinned = (old, ("127.0.0.1", cluster.brokers[old].port))
    # both keep writing to the old leader; acks=1 answers at once, so its refusals time the fence
    stuck = LeaderProducer(leaders, 0, tag="pinned", pinned=pinned, timeout_ms=1000)
    probe = LeaderProducer(leaders, 0, tag="probe", pinned=pinned, acks=1, batch=1)
    following = LeaderProducer(leaders, 0, tag="following", timeout_ms=1000)
    consumers = [LeaderConsumer(leaders, [0], name="old-leader's reader", pinned=pinned),
                 LeaderConsumer(leaders, [0], name="leader-following reader")]
    loops = [stuck, probe, following, *consumers]
    for loop in loops:
        loop.start()
    try:
        cluster.wait_for(lambda: stuck.acked and probe.acked and following.acked, what="the first acknowledgements")
        proxies[old].blackhole()
        cut_at = time.monotonic()

        cluster.wait_for(lambda: any(r[0] > cut_at and r[2] == NOT_LEADER for r in probe.refusals),
                         timeout_s=10, what="the cut-off leader to refuse writes")
        fenced_at = next(r[0] for r in probe.refusals if r[0] > cut_at and r[2] == NOT_LEADER)
        # fenced on SUSPENDED (kazoo: 2/3 of the session without an answer), so before ZooKeeper
        # can expire the session and another broker can lead
        assert fenced_at - cut_at < SESSION_TIMEOUT_S, f"fenced {fenced_at - cut_at:.2f} s after the cut"
        ghosts = [f"ghost{i}".encode() for i in range(5)]
        with Wire(cluster.brokers[old]) as wire:
            for acks in (1, -1):
                assert wire.produce(TOPIC, 0, ghosts, acks=acks)[0] == NOT_LEADER
            # acks=0 has no answer: whether it was taken shows in the final log
            wire.send(encode_replication_request(ProduceAckRequest(0, 1000, MultiProduceRequest((
                ProduceRequest(TOPIC, 0, encode_message_set(ghosts)),)))))
            assert wire.produce(TOPIC, 0, ghosts, acks=1)[0] == NOT_LEADER  # answered after the acks=0 one

        cluster.wait_for(lambda: cluster.leaders(TOPIC, via=others[0])[0] not in (old, -1), timeout_s=15,
                         what="another leader")
        new = cluster.leaders(TOPIC, via=others[0])[0]
        cluster.wait_for(lambda: following.first_ack_after(cut_at, not_by=old), timeout_s=15,
                         what="writes through the new leader")
        failover = following.first_ack_after(cut_at, not_by=old) - cut_at
        assert failover <= SESSION_TIMEOUT_S + 2 + (fenced_at - cut_at), f"failover took {failover:.2f} s"
        assert fenced_at < cut_at + failover, "a new leader took writes before the old one was fenced"
        # a set written before the fence may still be acknowledged after it, once the followers
        # (which the cut leaves in touch with the leader) have it: it is committed. A set written
        # after the leader refused one must never be.
        late = [a for a in [*stuck.acked, *probe.acked] if a.sent > fenced_at]
        assert late == [], f"the fenced leader acknowledged {len(late)} sets written after it refused"

        proxies[old].heal()
        healed_at = time.monotonic()
        cluster.wait_for(lambda: all_in_sync(cluster, TOPIC, via=others[0]),
                         timeout_s=30, what="the old leader back in the ISR")
        rejoin = time.monotonic() - healed_at
        for loop in (stuck, probe, following):
            loop.stop()
        with Wire(cluster.brokers[new]) as wire:
            final = {0: wire.read_all(TOPIC, 0)}
        cluster.wait_for(lambda: consumers[1].caught_up({0: final[0][-1][0] + 1}), what="the reader to catch up")
        for consumer in consumers:
            consumer.stop()
    finally:
        for loop in loops:
            if loop.is_alive():
                loop.stop()
    # acks=1 promises less: the probe's sets may be gone (unless a reader saw them), so only
    # the acks=all sets are checked
    history = check_history(final, [*stuck.acked, *following.acked], consumers)
    record(request, faults_injected=1, messages_checked=history.checked, messages_lost=len(history.lost))
    record_durations(request, "failover zk cut", [failover])
    record_durations(request, "rejoin", [rejoin])
    assert history.lost == [], "\n".join(history.lost[:20])
    assert not any(p in ghosts for _, p in final[0])
    assert any(a.at > cut_at for a in following.acked)
    cluster.wait_for(lambda: len({segment_bytes(b, TOPIC, 0) for b in cluster.brokers.values()}) == 1,
                     what="the old leader's copy to be identical")
