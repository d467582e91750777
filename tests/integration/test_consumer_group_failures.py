"""Consumer groups against a real ZooKeeper and real brokers (spec 5.2-5.5): a member killed
mid-stream, a session that expires, and a broker joining mid-run, seen by the ZooKeeper producer
and by the group.

The brokers, connectors and checks of tests/support/consumer_groups.py; every check polls.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from kazoo.client import KazooClient

from tests.support.consumer_groups import (  # noqa: F401 (fixtures)
    GROUP, cluster, collectors, committed, connector_factory, consumed_all, fill, owners, send, wait_registered,
)
from tests.support import consumer_group_member
from tests.support.consumer_groups import known
from tests.support.polling import wait_for
from twisted_broker.client.producer import Producer
from twisted_broker.config import ProducerConfig
from twisted_broker.registry import paths
from twisted_broker.registry.zk_partition_info import ZkBrokerPartitionInfo

GROUP_MEMBER = Path(consumer_group_member.__file__)


# -- failures: a killed member, an expired session, a broker joining ------------------------------

def test_killed_consumer_partitions_move_to_the_others_from_its_last_committed_offsets(
        broker_factory, zk_connect, zk, connector_factory, collectors, tmp_path):
    brokers = cluster(broker_factory, zk_connect)
    sent = fill(brokers, "t", 4, 40, "m")
    wait_registered(zk, "t", (0, 1))
    stdout_path = tmp_path / "member.out"
    with stdout_path.open("wb") as stdout:
        member = subprocess.Popen(
            [sys.executable, str(GROUP_MEMBER), zk_connect, GROUP, "t", "s",
             "--delay-ms", "20", "--commit-every", "5", "--session-timeout-ms", "1000",
             "--fetch-size", "200"],  # ~10 messages a chunk: its two partitions interleave
            stdout=stdout, stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        def events():
            lines = stdout_path.read_text().splitlines()
            return [json.loads(line) for line in lines if line.endswith("}")]
        wait_for(lambda: any(e["event"] == "ready" for e in events()), "the member process to start")
        a, b = connector_factory("a"), connector_factory("b")
        first, second = (collectors(c.create_message_streams({"t": 1})["t"][0]) for c in (a, b))
        # g_a-0, g_b-0, g_s-0: s takes the last range, 1-2 and 1-3.
        split = {"0-0": "g_a-0", "0-1": "g_a-0", "0-2": "g_a-0", "0-3": "g_b-0", "1-0": "g_b-0",
                 "1-1": "g_b-0", "1-2": "g_s-0", "1-3": "g_s-0"}
        wait_for(lambda: owners(zk, "t") == split, "the three-way split")
        mine = ("1-2", "1-3")
        wait_for(lambda: any(e["event"] == "commit" and all(p in e["consumed"] for p in mine) for e in events()),
                 "the member to commit progress in both its partitions")
        member.send_signal(signal.SIGKILL)
        member.wait(10)
    finally:
        if member.poll() is None:
            member.kill()
            member.wait()
    printed = [e for e in events() if e["event"] == "message"]
    left = committed(zk, "t")  # the dead member's last commits: nobody else writes them yet
    for partition in mine:
        mine_printed = [e for e in printed if e["partition"] == partition]
        assert len(mine_printed) < 40, "killed mid-stream"
    # The others take over once its session times out, and resume where it committed.
    others = {"0-0": "g_a-0", "0-1": "g_a-0", "0-2": "g_a-0", "0-3": "g_a-0",
              "1-0": "g_b-0", "1-1": "g_b-0", "1-2": "g_b-0", "1-3": "g_b-0"}
    wait_for(lambda: owners(zk, "t") == others, "the others to own everything", timeout_s=30)
    more = fill(brokers, "t", 4, 5, "more")
    extra = {e["payload"] for e in printed}
    wait_for(consumed_all([first, second], sent + more, extra=extra), "every message, at least once")
    taken_over = [m for m in second.snapshot() if m.partition in mine]
    for partition in mine:
        chain = [m for m in taken_over if m.partition == partition]
        start = left.get(partition, 0)
        assert chain[0].offset == start, f"{partition} resumed at {chain[0].offset}, committed {start}"
        for before, after in zip(chain, chain[1:]):
            assert after.offset == before.next_offset, f"{partition} skipped from {before.next_offset}"
        # Nothing before the commit point is consumed again, nothing after it is lost.
        expected = {f"m-1-{partition[2:]}-{i}" for i in range(40)} | {f"more-1-{partition[2:]}-{i}" for i in range(5)}
        assert expected <= {m.payload.decode() for m in chain} | {e["payload"] for e in printed
                                                                  if e["partition"] == partition}


def test_session_expiry_forgets_partitions_registers_again_and_rebalances(
        broker_factory, zk_connect, zookeeper, zk, connector_factory, collectors):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=2)
    sent = fill([broker], "t", 2, 5, "m")
    connector = connector_factory("a")
    collector = collectors(connector.create_message_streams({"t": 1})["t"][0])
    wait_for(lambda: owners(zk, "t") == {"0-0": "g_a-0", "0-1": "g_a-0"}, "ownership")
    wait_for(consumed_all([collector], sent), "the first messages")
    old_session = zk.exists(paths.consumer_id_path(GROUP, "g_a")).ephemeralOwner
    # Expire the connector's session from outside: a second client attached to the same session
    # closes it (white box: the session id and password are the registry's).
    session_id, password = connector._registry._client.client_id
    intruder = KazooClient(hosts=zk_connect, client_id=(session_id, password))
    intruder.start(10)
    intruder.stop()
    intruder.close()

    def registered_again():
        stat = zk.exists(paths.consumer_id_path(GROUP, "g_a"))
        return stat is not None and stat.ephemeralOwner not in (0, old_session)
    wait_for(registered_again, "the consumer to register in a new session")
    wait_for(lambda: owners(zk, "t") == {"0-0": "g_a-0", "0-1": "g_a-0"}, "ownership in the new session")
    for partition in ("0-0", "0-1"):
        stat = zk.exists(paths.owner_path(GROUP, "t", partition))
        assert stat.ephemeralOwner not in (0, old_session)
    later = fill([broker], "t", 2, 5, "later")
    wait_for(consumed_all([collector], later), "messages after the expiry")


def test_broker_joining_mid_run_is_picked_up_by_the_zk_producer_and_the_consumers(
        broker_factory, zk_connect, zk, connector_factory, collectors):
    (first_broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,))
    producer_config = ProducerConfig.from_properties({"zk.connect": zk_connect, "zk.sessiontimeout.ms": "4000"})
    info = ZkBrokerPartitionInfo.from_config(producer_config)
    producer = Producer(producer_config, broker_partition_info=info)
    try:
        # A new topic: every live broker's partition 0, then what broker 0 registers.
        assert info.partitions("t") == [(0, 0)]
        producer.send("t", [b"first"])
        wait_for(lambda: info.partitions("t") == [(0, 0), (0, 1), (0, 2), (0, 3)], "broker 0's partitions")
        a, b = connector_factory("a"), connector_factory("b")
        group = [collectors(c.create_message_streams({"t": 1})["t"][0]) for c in (a, b)]
        sent = ["first"]
        for i in range(40):
            producer.send("t", [f"before-{i}".encode()], key=f"k{i}")
            sent.append(f"before-{i}")
        wait_for(consumed_all(group, sent), "messages before the new broker")

        second_broker = broker_factory("broker1", broker_id=1, zk_connect=zk_connect,
                                       properties={"num.partitions": "4"})
        wait_for(lambda: known(info, 1), "the producer to see broker 1")
        # 0.7: a broker is used for an existing topic once it holds the topic. A message
        # produced to it directly creates it there (0.7's way of spreading a topic).
        assert [p for p in info.partitions("t") if p[0] == 1] == []
        sent += send(second_broker, "t", 0, ["direct"])
        wait_for(lambda: info.partitions("t") == [(b, p) for b in (0, 1) for p in range(4)],
                 "the producer to see broker 1's partitions")
        wait_for(lambda: set(owners(zk, "t")) == {f"{b}-{p}" for b in (0, 1) for p in range(4)},
                 "the consumers to own broker 1's partitions")
        for i in range(80):
            producer.send("t", [f"after-{i}".encode()], key=f"k{i}")
            sent.append(f"after-{i}")
        wait_for(consumed_all(group, sent), "every message")
        from_new_broker = {m.payload.decode() for c in group for m in c.snapshot() if m.partition.startswith("1-")}
        assert from_new_broker & {f"after-{i}" for i in range(80)}, "the producer sent to broker 1"
        # A topic first produced after broker 1 joined starts on both brokers.
        assert info.partitions("fresh") == [(0, 0), (1, 0)]
    finally:
        producer.close()
        info.close()
