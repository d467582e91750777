"""Hypothesis strategies for any value a Schema can carry, built by walking the schema."""

from hypothesis import strategies as st

from twisted_broker.codec.kafka.primitives import ArrayType, BytesType, FixedType, StringType, VarIntType
from twisted_broker.codec.kafka.schema import Schema

_INTS = {
    "INT8": st.integers(-128, 127),
    "INT16": st.integers(-(1 << 15), (1 << 15) - 1),
    "INT32": st.integers(-(1 << 31), (1 << 31) - 1),
    "INT64": st.integers(-(1 << 63), (1 << 63) - 1),
    "UINT32": st.integers(0, (1 << 32) - 1),
    "BOOLEAN": st.booleans(),
}


def values_of(ftype):
    """A strategy for values of ``ftype`` (decoded form: bytes fields as bytes)."""
    if isinstance(ftype, Schema):
        return st.fixed_dictionaries({name: values_of(t) for name, t, _ in ftype.fields})
    if isinstance(ftype, ArrayType):
        items = st.lists(values_of(ftype.element), max_size=3)
        return st.one_of(st.none(), items) if ftype.nullable else items
    if isinstance(ftype, StringType):
        text = st.text(max_size=12)
        return st.one_of(st.none(), text) if ftype.nullable else text
    if isinstance(ftype, BytesType):
        data = st.binary(max_size=20)
        return st.one_of(st.none(), data) if ftype.nullable else data
    if isinstance(ftype, VarIntType):
        return st.integers(-(1 << 31), (1 << 31) - 1)
    if isinstance(ftype, FixedType):
        return _INTS[ftype.name]
    raise TypeError(ftype)


def plain(value):
    """``value`` with memoryviews turned to bytes, for comparing decoded with original."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, memoryview):
        return value.tobytes()
    return value
