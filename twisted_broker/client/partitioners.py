"""Partitioners: what ``partitioner.class`` names in 0.7, choosing a partition from a key.

A partitioner is any callable ``(key, number of partitions) -> index`` into the topic's sorted
``(broker id, partition)`` list (spec 5.6). ``DefaultPartitioner`` is 0.7's:
``abs(key.hashCode) % n``, with Java's hash codes so a Python producer sends a key to the same
partition as a Java one:

- ``str``: ``String.hashCode`` over UTF-16 code units (``s[0]*31^(n-1) + ... + s[n-1]``, int32
  arithmetic), so keys outside the BMP hash their surrogate pairs as Java does;
- ``bytes``: ``java.util.Arrays.hashCode(byte[])`` (start at 1, signed bytes). 0.7 called
  ``hashCode`` on a ``byte[]`` key, which is Java's identity hash (a different partition per
  array object, even for equal bytes), so there is nothing stable to match; Arrays.hashCode is
  what a Java partitioner written for byte keys uses;
- ``int``: ``Integer.hashCode`` (the value itself, as int32).

``abs`` is Python's: Java's ``Math.abs(Integer.MIN_VALUE)`` stays negative and 0.7 then failed
with an index error for such a key (``"polygenelubricants"``); we send it to partition
``2**31 % n``. The producer picks a random partition for a ``None`` key before asking the
partitioner, as 0.7 does; DefaultPartitioner does the same when called directly.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from typing import Any

from twisted_broker.client.class_names import resolve

Partitioner = Callable[[Any, int], int]

_MASK = 0xFFFFFFFF


def _to_int32(value: int) -> int:
    value &= _MASK
    return value - 0x100000000 if value & 0x80000000 else value


def java_string_hashcode(value: str) -> int:
    """Java's ``String.hashCode`` of ``value`` (a signed 32-bit int)."""
    if value.isascii():
        units: Any = value.encode("ascii")  # iterating bytes yields the code units as ints
    else:
        data = value.encode("utf-16-be", "surrogatepass")
        units = struct.unpack(f">{len(data) // 2}H", data)
    h = 0
    for unit in units:
        h = (31 * h + unit) & _MASK
    return _to_int32(h)


def java_bytes_hashcode(value: bytes | bytearray | memoryview) -> int:
    """Java's ``Arrays.hashCode(byte[])`` of ``value`` (bytes are signed in Java)."""
    h = 1
    for byte in bytes(value):
        h = (31 * h + (byte - 256 if byte > 127 else byte)) & _MASK
    return _to_int32(h)


def java_hashcode(key: Any) -> int:
    """The Java hash code of a str, bytes-like or int key. Raises TypeError for other types."""
    if isinstance(key, str):
        return java_string_hashcode(key)
    if isinstance(key, (bytes, bytearray, memoryview)):
        return java_bytes_hashcode(key)
    if isinstance(key, int) and not isinstance(key, bool):
        return _to_int32(key)
    raise TypeError(f"no Java hash code for a {type(key).__name__} key; pass a partitioner for it")


class DefaultPartitioner:
    """``abs(java_hashcode(key)) % num_partitions``; a random partition for a None key."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def __call__(self, key: Any, num_partitions: int) -> int:
        if key is None:
            return self._rng.randrange(num_partitions)
        return abs(java_hashcode(key)) % num_partitions


# partitioner.class values of 0.7 property files, mapped to ours.
JAVA_PARTITIONERS = {"kafka.producer.DefaultPartitioner": DefaultPartitioner}


def load_partitioner(name_or_partitioner: str | Partitioner) -> Partitioner:
    """A partitioner from a partitioner.class value or a callable (returned as it is).

    Raises ValueError for a name that does not resolve, TypeError if it is not callable.
    """
    if isinstance(name_or_partitioner, str):
        partitioner = resolve(name_or_partitioner, JAVA_PARTITIONERS)
    else:
        partitioner = name_or_partitioner
    if not callable(partitioner):
        raise TypeError(f"partitioner {name_or_partitioner!r} is not callable")
    return partitioner
