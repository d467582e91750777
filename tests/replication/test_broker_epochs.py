"""A follower that restarted and lost its unflushed tail is never elected over a complete
replica (issue 22, defect 5; Kafka's broker epoch, KIP-380), on three real brokers.

The leader, which is also the controller, is paused (SIGSTOP): nobody can take the restarted
follower out of the ISR. The follower is killed, loses everything it had not flushed (its
copy of the partition is gone, as after a power cut with nothing fsynced), and comes back at
once (its next run was started beforehand on the same log dir and waits for the directory's
lock, which the kill releases). Then the leader dies. The next controller finds both followers live and in the ISR, the
restarted one first in the assignment and leading nothing: only its registration's epoch (a
czxid newer than the state) tells it lacks what was acknowledged. The complete follower must
be elected, and every acknowledged acks=all record is still there."""

from __future__ import annotations

import os
import shutil
import signal
import threading
from pathlib import Path

from tests.support.brokers import BrokerProcess
from tests.support.replicated_cluster import committed, produce_all
from twisted_broker.registry import paths as registry_paths
from twisted_broker.registry import replication_paths as paths
from twisted_broker.registry.replication_paths import PartitionState, TopicAssignment

TOPIC = "tail"


def state(cluster) -> PartitionState:
    """The partition's state in ZooKeeper (an offline one before the controller wrote it)."""
    from kazoo.exceptions import NoNodeError
    client = cluster.zk_client()
    try:
        return PartitionState.decode(client.get(paths.state_path(TOPIC, 0))[0])
    except NoNodeError:
        return PartitionState(-1, -1, (), -1)
    finally:
        client.stop()
        client.close()


def holds_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open (the lock it waits to take)."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        return any(os.readlink(fd) == str(path) for fd in fds.iterdir())
    except (FileNotFoundError, ProcessLookupError):  # the process or one of its fds went meanwhile
        return False


def test_a_restarted_follower_that_lost_its_tail_is_not_elected_over_a_complete_one(replicated_cluster):
    cluster = replicated_cluster
    # Nothing is fsynced during the test: a killed broker whose files go loses its whole copy.
    cluster.properties.update({"log.flush.interval": "1000000", "log.default.flush.interval.ms": "600000",
                               "log.default.flush.scheduler.interval.ms": "600000", "num.partitions": "1",
                               # the longest session the test ZooKeeper allows (20 ticks): the
                               # paused leader's outlasts the follower's restart with room to spare
                               "zk.sessiontimeout.ms": "4000"})
    cluster.start_all()
    cluster.wait_for(lambda: cluster.controller() is not None, what="a controller")
    controller = cluster.controller()
    restarted, complete = sorted({0, 1, 2} - {controller})
    # The controller leads; the follower that will restart comes first among the others, so
    # that leader counts and assignment order both pick it.
    client = cluster.zk_client()
    try:
        client.create(paths.topic_path(TOPIC), TopicAssignment({0: (controller, restarted, complete)}).encode(),
                      makepath=True)
    finally:
        client.stop()
        client.close()
    cluster.wait_for(lambda: set(state(cluster).isr) == {0, 1, 2}, what="every replica in sync", timeout_s=30)
    payloads = [f"acked{i}".encode() for i in range(30)]
    produce_all(cluster, TOPIC, 0, payloads, via=controller)
    assert state(cluster).leader == controller

    # The follower's next run is started beside it on the same log dir, whose copy of the
    # partition is gone (nothing was fsynced: what a power cut leaves), and waits for the
    # directory's lock; the restart itself is then one quick step, whatever a loaded machine
    # makes of a process start.
    follower = cluster.brokers[restarted]
    shutil.rmtree(Path(follower.log_dir) / f"{TOPIC}-0")
    again = BrokerProcess(cluster.root / f"broker-{restarted}-again", broker_id=restarted,
                          zk_connect=cluster.zk_connect, properties={**cluster.properties,
                                                                     "log.dir": str(follower.log_dir)})
    starting = threading.Thread(target=again.start, kwargs={"timeout_s": 60}, daemon=True)
    starting.start()
    cluster.wait_for(lambda: again.process is not None and holds_open(again.process.pid, Path(follower.log_dir) / ".lock"),
                     what="the follower's next run to wait for its log dir's lock", timeout_s=30)
    leader = cluster.brokers[controller]
    leader.process.send_signal(signal.SIGSTOP)  # leader and controller: nobody can shrink the ISR
    try:
        follower.kill()
        client = cluster.zk_client()
        try:  # its session's registration goes as at that session's expiry: the next run registers
            client.delete(registry_paths.broker_id_path(restarted))
        finally:
            client.stop()
            client.close()
        starting.join(30)
        assert again.port is not None, again.log_tail()
        cluster.brokers[restarted] = again
        assert restarted in state(cluster).isr, "nothing could take it out of the ISR while the leader is paused"
    finally:
        leader.kill()  # dead: the controller and the leader go with its session
    elected = cluster.wait_for(lambda: (s := state(cluster)).leader not in (controller, -1) and s,
                               what="a new leader", timeout_s=20)
    assert elected.leader == complete, f"the restarted follower was elected: {elected}"
    # (the restarted follower may already be back in the ISR: the new leader takes it back
    # once it has copied everything)
    produce_all(cluster, TOPIC, 0, [b"after"], via=complete)
    assert committed(cluster, TOPIC, 0, complete) == payloads + [b"after"]
    cluster.wait_for(lambda: committed(cluster, TOPIC, 0, restarted) == payloads + [b"after"],
                     what="the restarted follower to copy everything back", timeout_s=20)
