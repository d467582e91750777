"""The systems of the comparison with the 2011 Kafka paper (bench/paper.py), one module each.

Every module holds a Peer (base.py): how its server is started on loopback, with which
persistence settings, and its client roles (produce, consume, latency). harness.py has what
they share; worker.py runs a role in a process of its own. Modules are imported lazily, so a
peer whose client library is missing only loses its own column.
"""

from __future__ import annotations

import importlib

from bench.peers.base import Peer

# key -> "module:class", in the order of the table and chart.
SYSTEMS = {
    "twisted_broker": "bench.peers.tbroker:TwistedBroker",
    "twisted_broker_rf3": "bench.peers.tbroker_replicated:TwistedBrokerReplicated",
    "rabbitmq": "bench.peers.rabbitmq:RabbitMQ",
    "activemq": "bench.peers.activemq:ActiveMQ",
    "redis": "bench.peers.redis_streams:RedisStreams",
    "nats": "bench.peers.nats_jetstream:NatsJetStream",
}


# Systems run only by other benchmarks (bench/tail.py), not columns of the paper's table.
EXTRA_SYSTEMS = {
    "twisted_broker_rf1": "bench.peers.tbroker_replicated:TwistedBrokerCommitted",
    "twisted_broker_defaults": "bench.peers.tbroker_defaults:TwistedBrokerDefaults",
    "twisted_broker_defaults_modern": "bench.peers.tbroker_defaults:TwistedBrokerDefaultsModern",
}


def load(key: str) -> Peer:
    """The Peer for ``key``; ImportError if its client library is not installed."""
    module, _, name = {**SYSTEMS, **EXTRA_SYSTEMS}[key].partition(":")
    return getattr(importlib.import_module(module), name)()
