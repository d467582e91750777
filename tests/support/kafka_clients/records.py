"""The records the client tests send and the form every client adapter gives back.

A record has a key (None for every fifth, so null keys are covered too), a value long and
repetitive enough for every codec to shrink it, two headers and an explicit timestamp
(one second apart, starting a minute ago, so a timestamp lookup has distinct answers).
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


@dataclass(frozen=True)
class Consumed:
    partition: int
    offset: int
    record: Record


def sample_records(count: int, tag: str, *, base_ms: int | None = None) -> list[Record]:
    base_ms = base_ms if base_ms is not None else int(time.time() * 1000) - 60_000
    return [Record(key=None if i % 5 == 0 else f"{tag}-key-{i}".encode(),
                   value=f"{tag} value {i} ".encode() * 8,
                   headers=(("source", tag.encode()), ("index", str(i).encode())),
                   timestamp_ms=base_ms + 1000 * i)
            for i in range(count)]


def assert_same_records(sent: list[Record], consumed: list[Consumed]) -> None:
    """The records came back whole, in order, at increasing offsets."""
    assert [c.record for c in consumed] == sent
    offsets = [c.offset for c in consumed]
    assert offsets == sorted(set(offsets)), f"offsets not strictly increasing: {offsets}"


def values(consumed: list[Consumed]) -> list[bytes]:
    return [c.record.value for c in consumed]
