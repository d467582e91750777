"""Declarative schemas: a request or response body of one API version as a table of fields.

A ``Schema`` is an ordered tuple of fields, each ``(name, type)`` or ``(name, type, default)``,
where a type is a primitive (primitives.py), ``Array(...)``/``NullableArray(...)`` of a type,
or another ``Schema`` (a struct inline). One generic walker encodes and decodes them:

- ``decode(buf, pos)`` returns ``(dict, next position)``: one key per field of *this*
  version, nested structs as dicts, arrays as lists.
- ``encode(value, out)`` reads ``value[name]`` for each field of this version and ignores
  other keys, so a handler builds one dict for every version it serves and the table picks
  what each version carries. A missing field takes its default when the table gives one
  (fields added by later versions mostly do), else ``SchemaError`` names its path.

Versions are built by ``evolve``: a later version is an earlier one with fields added,
removed or retyped, written as the difference, as Kafka's own message specs read.
"""

from __future__ import annotations

from typing import Any, Iterable

from twisted_broker.codec.kafka.primitives import ArrayType, Buffer, ChunkWriter, Gap

_MISSING = object()


class SchemaError(ValueError):
    """A value cannot be encoded by a schema: a field is missing or has the wrong type."""


class Schema:
    """An ordered struct of fields; usable as a field type itself (nested structs)."""

    __slots__ = ("fields", "names", "_plan")

    def __init__(self, *fields: tuple) -> None:
        self.fields = tuple(_field(f) for f in fields)
        self.names = tuple(name for name, _, _ in self.fields)
        self._plan = tuple((name, ftype.decode, ftype.encode, default) for name, ftype, default in self.fields)

    def decode(self, buf: Buffer, pos: int) -> tuple[dict, int]:
        """Decode a struct at ``pos``; raises Truncated or Malformed (both carry the position)."""
        value = {}
        for name, decode, _, _ in self._plan:
            value[name], pos = decode(buf, pos)
        return value, pos

    def encode(self, value: dict, out: bytearray) -> None:
        """Append ``value`` encoded to ``out``. Raises SchemaError naming the field's path."""
        for name, _, encode, default in self._plan:
            item = value.get(name, default)
            if item is _MISSING:
                raise SchemaError(f"field {name!r} missing (has {sorted(value)})")
            try:
                encode(item, out)
            except SchemaError as exc:
                raise SchemaError(f"{name}.{exc}") from None
            except (TypeError, ValueError, AttributeError, OverflowError) as exc:
                raise SchemaError(f"{name}: {exc}") from exc

    def to_bytes(self, value: dict) -> bytes:
        out = bytearray()
        self.encode(value, out)
        return bytes(out)

    def field_type(self, name: str) -> Any:
        for field_name, ftype, _ in self.fields:
            if field_name == name:
                return ftype
        raise KeyError(name)

    def evolve(self, *, add: Iterable[tuple] = (), drop: Iterable[str] = (),
               change: dict[str, Any] | None = None, before: str | None = None) -> "Schema":
        """A new schema: ``drop`` removes fields by name, ``change`` maps a name to a new type
        (or a function old type -> new type, for nested structs), ``add`` appends fields (or
        inserts them before the field named ``before``)."""
        change = change or {}
        dropped = set(drop)
        fields: list[tuple] = []
        for name, ftype, default in self.fields:
            if name in dropped:
                continue
            if name in change:
                new = change[name]
                ftype = new(ftype) if callable(new) and not hasattr(new, "decode") else new
            if name == before:
                fields.extend(add)
            fields.append((name, ftype) if default is _MISSING else (name, ftype, default))
        if before is None:
            fields.extend(add)
        elif before not in self.names:
            raise KeyError(before)
        return Schema(*fields)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Schema) and self.fields == other.fields

    def __hash__(self) -> int:
        return hash(self.names)

    def __repr__(self) -> str:
        return "Schema(" + ", ".join(f"{name}: {ftype!r}" for name, ftype, _ in self.fields) + ")"


def _field(spec: tuple) -> tuple[str, Any, Any]:
    if len(spec) == 2:
        return spec[0], spec[1], _MISSING
    if len(spec) == 3:
        return spec[0], spec[1], spec[2]
    raise ValueError(f"a field is (name, type) or (name, type, default), not {spec!r}")


def in_array(change: Any) -> Any:
    """For ``evolve(change=...)``: apply ``change`` to the Schema inside an Array field."""
    def apply(array: ArrayType) -> ArrayType:
        inner = array.element
        if isinstance(change, dict):
            new_inner = inner.evolve(change=change)
        elif callable(change) and not hasattr(change, "decode"):
            new_inner = change(inner)
        else:
            new_inner = change
        return ArrayType(new_inner, array.nullable)
    return apply


def encode_chunks(schema: Schema, value: dict, prefix: bytes = b"") -> list[bytes | Gap]:
    """Encode ``value`` as byte chunks and Gaps (record sets the caller sends), in order.

    ``prefix`` (a response header, say) is put first. See protocol.py for framing them.
    """
    out = ChunkWriter()
    out += prefix
    schema.encode(value, out)
    return out.finish()


def chunks_size(chunks: list[bytes | Gap]) -> int:
    """Total bytes the chunks stand for, gaps included."""
    return sum(chunk.size if type(chunk) is Gap else len(chunk) for chunk in chunks)
