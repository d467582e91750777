"""Kafka 0.7's ZooKeeper paths and node values (spec 5.2-5.3). Pure: no I/O.

Node data is the value string as raw UTF-8. Broker values are ``creatorId:host:port`` with
``creatorId = host-startupMs``; readers split on ``:`` and use fields 1 and 2.
"""

from __future__ import annotations

from dataclasses import dataclass

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONSUMERS = "/consumers"


def broker_id_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def broker_topic_path(topic: str, broker_id: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/{broker_id}"


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    creator_id: str
    host: str
    port: int

    def encode(self) -> bytes:
        return f"{self.creator_id}:{self.host}:{self.port}".encode()

    @classmethod
    def decode(cls, broker_id: int, value: bytes) -> "BrokerInfo":
        """Parse a ``/brokers/ids/<id>`` value. Raises ValueError if it is not creator:host:port."""
        fields = value.decode("utf-8").split(":")
        if len(fields) != 3 or not (fields[2].isascii() and fields[2].isdigit()):
            raise ValueError(f"broker {broker_id} registration {value!r} is not creatorId:host:port")
        return cls(broker_id, fields[0], fields[1], int(fields[2]))


def creator_id(host: str, startup_ms: int) -> str:
    return f"{host}-{startup_ms}"


def encode_partition_count(count: int) -> bytes:
    return str(count).encode()


def decode_partition_count(value: bytes) -> int:
    return int(value.decode("ascii"))
