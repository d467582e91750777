"""Encoders: what ``serializer.class`` names in 0.7, turning a producer's values into payloads.

An encoder is any callable ``value -> bytes``. ``DefaultEncoder`` passes bytes-like payloads
through (0.7's ``kafka.serializer.DefaultEncoder`` took ready-made Messages; here the message
framing is always the producer's job, so it takes the payload bytes). ``StringEncoder``
encodes text as UTF-8, as 0.7's default ``serializer.encoding``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted_broker.client.class_names import resolve

Encoder = Callable[[Any], bytes | bytearray | memoryview]


class DefaultEncoder:
    """Bytes-like payloads unchanged. Raises TypeError for anything else (str included)."""

    def __call__(self, value: Any) -> bytes | bytearray | memoryview:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"DefaultEncoder takes bytes-like payloads, not {type(value).__name__};"
                            " use StringEncoder for text")
        return value


class StringEncoder:
    """Text as bytes in ``encoding`` (0.7's serializer.encoding, UTF-8 by default)."""

    def __init__(self, encoding: str = "utf-8") -> None:
        self.encoding = encoding

    def __call__(self, value: str) -> bytes:
        if not isinstance(value, str):
            raise TypeError(f"StringEncoder takes str, not {type(value).__name__}")
        return value.encode(self.encoding)


# serializer.class values of 0.7 property files, mapped to ours.
JAVA_ENCODERS = {
    "kafka.serializer.DefaultEncoder": DefaultEncoder,
    "kafka.serializer.StringEncoder": StringEncoder,
}


def load_encoder(name_or_encoder: str | Encoder) -> Encoder:
    """An encoder from a serializer.class value or a callable (returned as it is).

    Raises ValueError for a name that does not resolve, TypeError if it is not callable.
    """
    encoder = resolve(name_or_encoder, JAVA_ENCODERS) if isinstance(name_or_encoder, str) else name_or_encoder
    if not callable(encoder):
        raise TypeError(f"encoder {name_or_encoder!r} is not callable")
    return encoder
