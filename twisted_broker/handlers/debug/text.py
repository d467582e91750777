"""The debug port's text, both ways: command lines and their arguments in, aligned plain
text out. Pure: no broker, no Twisted.

The answer's shape is part of the interface (network/debug_lines.py, the debug port): one or more
non-empty lines of plain text, columns aligned, numbers right-aligned. The protocol ends each
answer with an empty line, so nothing here may produce one. Payloads and ZooKeeper data are
shown as printable ASCII in double quotes with every other byte escaped, and cut at
``PAYLOAD_PREVIEW_BYTES``. User input echoed in an error is quoted and escaped too, so that a
line typed into a terminal cannot play terminal tricks on whoever reads the answer.
"""

from __future__ import annotations

from collections.abc import Sequence

PAYLOAD_PREVIEW_BYTES = 200


class DebugCommandError(Exception):
    """A bad command or argument, or a request the broker cannot answer: ``error: <message>``."""


# -- arguments ---------------------------------------------------------------------------------

def parse_line(line: str) -> tuple[str, list[str]]:
    """(command, arguments) of a line: words split on whitespace, the command lower-cased."""
    words = line.split()
    if not words:
        raise DebugCommandError("empty command")
    return words[0].lower(), words[1:]


def integer_argument(text: str, what: str, minimum: int = 0, maximum: int | None = None) -> int:
    """``text`` as a decimal integer in ``[minimum, maximum]``; DebugCommandError naming ``what``."""
    try:
        value = int(text, 10)
    except ValueError:
        raise DebugCommandError(f"{what} must be an integer, not {quoted_input(text)}") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
        raise DebugCommandError(f"{what} must be {bound}, not {value}")
    return value


def partition_argument(text: str, broker_id: int) -> int:
    """A PARTITION argument: ``P``, or ``BROKER-P`` as the CLI and the admin console name a
    partition across brokers; DebugCommandError unless BROKER is ``broker_id`` (this broker)."""
    broker, dash, partition = text.rpartition("-")
    if not dash or not broker:  # "3", or "-1": a plain (bad) partition number
        return integer_argument(text, "PARTITION")
    broker_value = integer_argument(broker, "BROKER of BROKER-PARTITION")
    if broker_value != broker_id:
        raise DebugCommandError(f"partition {quoted_input(text)} is on broker {broker_value}; "
                                f"this is broker {broker_id}: give P or {broker_id}-P")
    return integer_argument(partition, "PARTITION of BROKER-PARTITION")


def quoted_input(text: str) -> str:
    """User input echoed in an error: quoted, control characters escaped (no terminal tricks)."""
    return repr(text)


# -- formatting --------------------------------------------------------------------------------

Cell = str | int | float


def _cell_text(cell: Cell) -> str:
    return f"{cell:.2f}" if isinstance(cell, float) else str(cell)


def format_table(header: Sequence[str], rows: Sequence[Sequence[Cell]], indent: str = "") -> list[str]:
    """The header and rows as columns two spaces apart; numeric columns right-aligned.

    A column is numeric when every row holds an int, a float or "-" (none) there. No line
    ends in blanks.
    """
    text = [list(header), *([_cell_text(cell) for cell in row] for row in rows)]
    numeric = [bool(rows) and all(isinstance(row[column], (int, float)) or row[column] == "-" for row in rows)
               for column in range(len(header))]
    widths = [max(len(row[column]) for row in text) for column in range(len(header))]
    return [(indent + "  ".join(cell.rjust(width) if right else cell.ljust(width)
                                for cell, width, right in zip(row, widths, numeric))).rstrip()
            for row in text]


def format_pairs(pairs: Sequence[tuple[str, Cell]], indent: str = "") -> list[str]:
    """``name  value`` lines, names padded to one width, values aligned as ``format_table`` does."""
    return format_table(["", ""], pairs, indent)[1:]


def _byte_escape(byte: int) -> str:
    if byte in (0x22, 0x5C):  # '"' and '\'
        return "\\" + chr(byte)
    if 0x20 <= byte < 0x7F:
        return chr(byte)
    return {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}.get(byte, f"\\x{byte:02x}")


_ESCAPES = tuple(_byte_escape(byte) for byte in range(256))


def escape_bytes(data: bytes | memoryview, limit: int = PAYLOAD_PREVIEW_BYTES) -> str:
    """``data`` in double quotes as printable ASCII: ``\\"``, ``\\\\``, ``\\n``, ``\\t``, ``\\r``,
    ``\\xNN`` for every other byte outside 0x20-0x7e; cut at ``limit`` bytes with ``...(+N bytes)``."""
    shown = bytes(data[:limit])
    rest = len(data) - len(shown)
    return '"' + "".join([_ESCAPES[byte] for byte in shown]) + '"' + (f"...(+{rest} bytes)" if rest else "")
