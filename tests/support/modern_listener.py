"""Brokers with the modern listener for tests/kafka_clients, and kafka-python clients of it.

The listener is opened with ``--kafka-endpoint tcp:0`` and reports its bound port in a file,
as the 0.7 port does (no race for a free port). The broker writes the 0.7 port's file last,
so once ``BrokerProcess.start`` returns the listener's file is there.
"""

from __future__ import annotations

from tests.support.brokers import BrokerProcess


def start_with_listener(broker_factory, name: str = "broker", **options) -> tuple[BrokerProcess, int]:
    """A broker (broker_factory's options) with its modern listener; returns it and that port."""
    extra = list(options.pop("extra_args", []))
    broker = broker_factory(name, extra_args=[*extra, "--kafka-endpoint", "tcp:0:interface=127.0.0.1",
                                              "--kafka-port-file", "kafka-port"], **options)
    return broker, int((broker.directory / "kafka-port").read_text())


def admin(port: int):
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=10000)


def raw_request(port: int, api_key: int, version: int, body: dict) -> dict:
    """One request on a new connection, with this project's codec; the response body."""
    import socket
    import struct

    from twisted_broker.codec.kafka.protocol import decode_response, encode_request

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(encode_request(api_key, version, 1, "test", body))
        reader = sock.makefile("rb")
        (size,) = struct.unpack(">i", reader.read(4))
        return decode_response(api_key, version, reader.read(size))[1]
