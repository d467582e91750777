"""Where a producer's topics live: the BrokerPartitionInfo interface and its broker.list form.

0.7's producer asks one of two implementations (spec 5.6):

- ZooKeeper mode (``zk.connect``): the ``(broker id, partition)`` pairs registered under
  ``/brokers/topics/<topic>``, watched for changes. That implementation lives with the rest of
  the ZooKeeper code in ``twisted_broker.registry`` and is passed to ``Producer`` by the caller;
- ``broker.list`` mode: ConfigBrokerPartitionInfo below. Each listed broker counts as one
  partition, and requests carry partition -1 so the broker picks one of its own.

An implementation answers from what it already knows, without blocking: ``partitions`` and
``broker`` are called from the threads that call ``Producer.send`` and from the async send
thread (never from a reactor thread: the blocking producer does not run there). ``refresh``
may block while it re-reads the registry; the producer calls it when a chosen broker is
unknown, up to ``zk.read.num.retries`` times.
"""

from __future__ import annotations

from typing import Protocol

from twisted_broker.client.sync_producer import RANDOM_PARTITION


class BrokerPartitionInfo(Protocol):
    """The brokers and partitions a producer can send a topic to."""

    def partitions(self, topic: str) -> list[tuple[int, int]]:
        """``(broker id, partition)`` pairs for ``topic``, sorted numerically by broker id then
        partition (the order the partitioner's index refers to). Empty: nowhere to send.

        For a topic no broker has registered yet, 0.7 offers partition 0 of every live broker
        (the broker creates the topic on the first produce)."""

    def broker(self, broker_id: int) -> tuple[str, int]:
        """``(host, port)`` of a broker. Raises KeyError for a broker that is not known (now)."""

    def refresh(self) -> None:
        """Re-read the registry, so the next answers are current."""

    # Optional: ``brokers() -> {id: (host, port)}``, the brokers a producer may ask about
    # replicated topics; without it, every topic is sent as a 0.7 topic. Optional too:
    # ``registered_0_7(topic) -> bool``, True for a topic known to be a 0.7 one (no question).


def parse_broker_list(broker_list: str) -> dict[int, tuple[str, int]]:
    """Parse ``id:host:port,id:host:port`` into ``{id: (host, port)}``.

    Raises ValueError naming the bad entry (0.7 failed later, with a NumberFormatException).
    """
    brokers: dict[int, tuple[str, int]] = {}
    for entry in broker_list.split(","):
        entry = entry.strip()
        if not entry:
            continue
        broker_id, _, address = entry.partition(":")
        host, _, port = address.rpartition(":")
        try:
            parsed_id, parsed_port = int(broker_id), int(port)
        except ValueError:
            raise ValueError(f"broker.list entry {entry!r} is not id:host:port") from None
        if not host or not 0 < parsed_port < 65536:
            raise ValueError(f"broker.list entry {entry!r} is not id:host:port")
        if parsed_id in brokers:
            raise ValueError(f"broker.list names broker {parsed_id} twice")
        brokers[parsed_id] = (host, parsed_port)
    if not brokers:
        raise ValueError("broker.list names no broker")
    return brokers


class ConfigBrokerPartitionInfo:
    """The brokers of a static ``broker.list``: every topic on every broker, partition -1."""

    def __init__(self, broker_list: str) -> None:
        self._brokers = parse_broker_list(broker_list)
        self._partitions = [(broker_id, RANDOM_PARTITION) for broker_id in sorted(self._brokers)]

    def partitions(self, topic: str) -> list[tuple[int, int]]:
        return list(self._partitions)

    def broker(self, broker_id: int) -> tuple[str, int]:
        return self._brokers[broker_id]

    def brokers(self) -> dict[int, tuple[str, int]]:
        return dict(self._brokers)

    def refresh(self) -> None:
        """Nothing to re-read: the list is fixed for the producer's life."""
