"""twisted_broker: a Kafka 0.7 compatible message broker on Twisted."""

__version__ = "0.1.0"
