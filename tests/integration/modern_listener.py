"""Brokers with the modern listener for the integration tests, and kafka-python clients of it.

The listener is opened with ``--kafka-endpoint tcp:0`` and reports its bound port in a file,
as the 0.7 port does (no race for a free port). The broker writes the 0.7 port's file last,
so once ``BrokerProcess.start`` returns the listener's file is there.
"""

from __future__ import annotations

from tests.integration.conftest import BrokerProcess


def start_with_listener(broker_factory, name: str = "broker", **options) -> tuple[BrokerProcess, int]:
    """A broker (broker_factory's options) with its modern listener; returns it and that port."""
    extra = list(options.pop("extra_args", []))
    broker = broker_factory(name, extra_args=[*extra, "--kafka-endpoint", "tcp:0:interface=127.0.0.1",
                                              "--kafka-port-file", "kafka-port"], **options)
    return broker, int((broker.directory / "kafka-port").read_text())


def admin(port: int):
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=10000)
