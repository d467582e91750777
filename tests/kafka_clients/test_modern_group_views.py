"""A consumer group of kafka-python on the modern listener, as ``twisted-broker groups``, the
admin console (a standalone ``twistd -n webui``) and its ``/metrics`` show it: a real broker
with ZooKeeper, a 0.7 topic and a replicated one. Such a group's offsets are modern offsets,
so its lag is Kafka's, ``modern end - committed``; its members come from the coordinator."""

from __future__ import annotations

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.support.cli import assert_one_line_error, group_rows, run_cli
from tests.support.console_process import ConsoleProcess, kind_shown, metric_families
from tests.support.modern_listener import admin, start_with_listener
from tests.support.polling import wait_for

OLD, REPLICATED = "old", "rep"


def produce(port: int, topic: str, partitions: int, count: int) -> dict[TopicPartition, int]:
    """Send ``count`` records round the partitions; the modern end each partition then has."""
    producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", acks=1)
    sent = [producer.send(topic, value=b"%s %d" % (topic.encode(), i), partition=i % partitions)
            for i in range(count)]
    producer.flush()
    producer.close()
    return {TopicPartition(topic, m.partition): m.offset + 1 for m in (future.get(10) for future in sent)}


def test_a_kafka_clients_group_shows_its_members_offsets_and_lag_in_records(broker_factory, zk_connect, tmp_path):
    broker, port = start_with_listener(broker_factory, zk_connect=zk_connect, properties={"num.partitions": "2"})
    client = admin(port)
    try:
        client.create_topics([NewTopic(REPLICATED, 3, 1)])
    finally:
        client.close()
    produce(port, OLD, 2, 10)
    produce(port, REPLICATED, 3, 12)
    member = KafkaConsumer(OLD, REPLICATED, bootstrap_servers=f"127.0.0.1:{port}", group_id="kg",
                           auto_offset_reset="earliest", enable_auto_commit=False,
                           session_timeout_ms=10000, heartbeat_interval_ms=1000)
    console = ConsoleProcess(tmp_path / "console", zk_connect, "--lag-sample-interval", "0.5")
    try:
        read = []
        assert wait_for(lambda: read.extend(r for rs in member.poll(timeout_ms=200).values() for r in rs)
                        or len(read) == 22, "every record read", timeout_s=30)
        member.commit()
        member_id = member._coordinator._generation.member_id  # noqa: SLF001 (kafka-python keeps it there)
        new_ends = produce(port, OLD, 2, 7)  # records after the commit, on both partitions of the 0.7 topic
        assert wait_for(lambda: member.end_offsets(list(new_ends)) == new_ends, "the new records flushed")
        ends = {(tp.topic, tp.partition): end for tp, end in member.end_offsets(list(member.assignment())).items()}
        committed = {(tp.topic, tp.partition): member.committed(tp) for tp in member.assignment()}
        lags = {key: ends[key] - committed[key] for key in ends}  # as Kafka's clients compute it
        assert lags[(OLD, 0)] > 0 and lags[(OLD, 1)] > 0 and not any(lags[(REPLICATED, p)] for p in range(3))

        # twisted-broker groups: modern ends, lag in records, the member as owner, and the
        # replicated topic's partitions in numeric order, after the 0.7 topic's b-p names.
        names = {(OLD, 0): "0-0", (OLD, 1): "0-1", **{(REPLICATED, p): str(p) for p in range(3)}}
        expected = [["kg", topic, names[(topic, p)], str(committed[(topic, p)]), str(ends[(topic, p)]),
                     str(lags[(topic, p)]), member_id] for topic, p in sorted(names)]
        assert group_rows(zk_connect, "--group", "kg") == expected
        assert_one_line_error(run_cli("reset-offsets", "--zk", zk_connect, "--group", "kg", "--topic", OLD,
                                      "--to", "earliest"), 1, "group kg is a group of Kafka clients")

        # The console: the group, its member and partitions, its lag.
        console.start()
        wait_for(lambda: kind_shown(console, "kg") == "kafka",
                 "the console to read the group and the listeners from the registry")
        page = console.api("/api/groups/kg")
        assert (page["kind"], page["lag_unit"], page["coordinator_state"]) == ("kafka", "offsets", "Stable")
        assert page["health"] == {"status": "ok", "problems": []}
        assert [(m["id"], m["host"], m["partitions"]) for m in page["members"]] == [
            (member_id, "/127.0.0.1", {OLD: [0, 1], REPLICATED: [0, 1, 2]})]  # the host as Kafka's brokers give it
        rows = {(row["topic"], row["partition"]): (row["committed"], row["latest"], row["lag"], row["owner"])
                for row in page["partitions"]}
        assert rows == {(topic, names[(topic, p)]): (committed[(topic, p)], ends[(topic, p)], lags[(topic, p)],
                                                     member_id) for topic, p in names}
        assert page["lag"] == {"total": sum(lags.values()), "complete": True}
        html = console.get("/groups/kg").text
        assert member_id in html and "offsets lag" in html and 'id="members"' in html
        wait_for(lambda: console.api("/api/groups")["groups"]["items"][0]["lag"] == sum(lags.values()), "a lag sample")
        listed = console.api("/api/groups")["groups"]["items"]
        assert [(g["name"], g["kind"], g["lag_unit"], g["health"]) for g in listed] == [
            ("kg", "kafka", "offsets", "kafka")]
        lag = {(s.labels["group"], s.labels["topic"]): s.value
               for s in metric_families(console.port)["twisted_broker_group_lag_offsets"].samples}
        assert lag == {("kg", OLD): lags[(OLD, 0)] + lags[(OLD, 1)], ("kg", REPLICATED): 0}
        assert not metric_families(console.port)["twisted_broker_group_lag_bytes"].samples
        # Once the member has left, the coordinator holds the group Empty: stopped, no owner.
        member.close()
        page = console.api("/api/groups/kg")
        assert (page["coordinator_state"], page["health"]["status"], page["members"]) == ("Empty", "stopped", [])
        assert {row["owner"] for row in page["partitions"]} == {None}

        # A 0.7 group on the replicated topic: partitions 0..2 in order, 0.7's latest offset
        # (the byte end) from each leader's 0.7 port, lag in bytes.
        consumed = run_cli("consume", "--zk", zk_connect, "--topic", REPLICATED, "--group", "g07", "--max-messages", 12)
        assert consumed.returncode == 0, consumed.stderr.decode()
        rows = group_rows(zk_connect, "--group", "g07")
        assert [row[2] for row in rows] == ["0", "1", "2"]
        assert all(row[3] == row[4] != "-" and row[5] == "0" for row in rows), rows
        assert all(int(row[4]) > ends[(REPLICATED, int(row[2]))] for row in rows)  # bytes, past the modern end
    finally:
        member.close()
        console.stop()
