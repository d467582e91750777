"""Each listener advertises its own endpoints (docs/security.md, "Listeners"): two brokers with two
listeners each (``PLAINTEXT`` and ``INTERNAL``, mapped to PLAINTEXT) answer Metadata with every
broker's endpoint of the listener the request came in on, as Kafka does; a client that
bootstraps on one listener is sent to that listener's ports only.
"""

from __future__ import annotations

from confluent_kafka.admin import AdminClient

from tests.support.brokers import BrokerProcess
from tests.support.kafka_clients.kafka_frames import Connection, decode_metadata_v1, metadata_v1
from tests.support.kafka_clients.modern_cluster import free_port, wait_for_listener
from tests.support.polling import wait_for

NAMES = ("PLAINTEXT", "INTERNAL")


def metadata_brokers(port: int) -> dict[int, tuple[str, int]]:
    with Connection(port) as connection:
        return decode_metadata_v1(connection.request(metadata_v1(3)))["brokers"]


def test_metadata_answers_the_endpoints_of_the_listener_asked(tmp_path, zk_connect):
    ports = {broker_id: {name: free_port() for name in NAMES} for broker_id in (1, 2)}
    brokers = []
    try:
        for broker_id, mine in ports.items():
            broker = BrokerProcess(tmp_path / f"b{broker_id}", broker_id=broker_id, zk_connect=zk_connect, properties={
                "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in mine.items()),
                "listener.security.protocol.map": "INTERNAL:PLAINTEXT"}).start()
            brokers.append(broker)
            assert wait_for_listener(broker, mine["PLAINTEXT"]) is not None, broker.log_tail()
        for name in NAMES:
            expected = {broker_id: ("127.0.0.1", mine[name]) for broker_id, mine in ports.items()}
            for broker_id in ports:  # asked on either broker, on that listener
                wait_for(lambda: metadata_brokers(ports[broker_id][name]) == expected,
                         f"broker {broker_id}'s {name} listener to advertise {expected}")
            # a client bootstrapping on one broker's listener learns the other's port of that listener
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports[1][name]}"})
            found = {b.id: (b.host, b.port) for b in admin.list_topics(timeout=10).brokers.values()}
            assert found == expected, (name, found)
    finally:
        for broker in brokers:
            broker.kill()
