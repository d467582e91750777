"""Java-properties text (java.util.Properties.load), the syntax of Kafka 0.7's config files.

Pure text handling: config.py turns the key -> text map into typed settings.
"""

from __future__ import annotations

import os
import re
import typing
from pathlib import Path


class ConfigError(ValueError):
    """A required key is missing or a value is invalid; the message names key and value."""


_BLANK = " \t\f"  # what java.util.Properties counts as whitespace
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java-properties text into key -> value; a repeated key keeps its last value.

    As java.util.Properties.load: ``key=value``, ``key: value`` or ``key value``; lines whose
    first non-blank character is ``#`` or ``!`` are comments; a line ending in an odd number
    of backslashes continues on the next, whose leading blanks are dropped; ``\\t``, ``\\n``,
    ``\\r``, ``\\f``, ``\\uXXXX`` and ``\\<c>`` (= c) escapes. Unlike Java, unescaped trailing
    blanks are dropped from values too: 0.7 would reject ``port=9092 `` over a space no editor
    shows. Raises ConfigError for a malformed ``\\uXXXX`` escape.
    """
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_key_value(line)
        props[key] = value
    return props


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read and parse a properties file (UTF-8; Java reads Latin-1, the same for ASCII)."""
    return parse_properties(Path(path).read_text(encoding="utf-8"))


def _logical_lines(text: str) -> typing.Iterator[str]:
    natural = iter(re.split(r"\r\n|\r|\n", text))
    for line in natural:
        line = line.lstrip(_BLANK)
        if not line or line[0] in "#!":  # a comment never continues, even after a backslash
            continue
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            line = line[:-1] + next(natural, "").lstrip(_BLANK)
        yield line


def _split_key_value(line: str) -> tuple[str, str]:
    end = 0
    while end < len(line) and line[end] not in "=:" + _BLANK:
        end += 2 if line[end] == "\\" else 1  # an escaped separator belongs to the key
    end = min(end, len(line))
    start = end
    while start < len(line) and line[start] in _BLANK:
        start += 1
    if start < len(line) and line[start] in "=:":
        start += 1
        while start < len(line) and line[start] in _BLANK:
            start += 1
    return _unescape(line[:end]), _unescape(_strip_unescaped_end(line[start:]))


def _unescape(raw: str) -> str:
    out: list[str] = []
    pos = 0
    while pos < len(raw):
        char = raw[pos]
        if char != "\\":
            out.append(char)
            pos += 1
        elif raw[pos + 1:pos + 2] == "u":
            digits = raw[pos + 2:pos + 6]
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise ConfigError(f"malformed \\uxxxx escape in {raw!r}")
            out.append(chr(int(digits, 16)))
            pos += 6
        else:
            next_char = raw[pos + 1:pos + 2]  # a lone trailing backslash yields nothing
            out.append(_ESCAPES.get(next_char, next_char))
            pos += 2
    return "".join(out)


def _strip_unescaped_end(raw: str) -> str:
    stripped = raw.rstrip(_BLANK)
    if (len(stripped) - len(stripped.rstrip("\\"))) % 2 == 1:
        return raw[:len(stripped) + 1]  # the first blank stripped was escaped (a\ ): keep it
    return stripped
