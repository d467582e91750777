"""Payload decoders, without Spark: JSON lines to typed columns, text, a user's function."""

from __future__ import annotations

import pyarrow as pa
import pytest

from twisted_broker.spark.decoders import DecodeError, make_decoder
from twisted_broker.spark.options import OptionError

SCHEMA = pa.schema([("user", pa.string()), ("amount", pa.int64())])


def _decode(spec, payloads, schema=SCHEMA, errors="fail"):
    return make_decoder(spec, schema, errors)(pa.array(payloads, pa.binary()),
                                              pa.array(range(100, 100 + len(payloads)), pa.int64()))


def test_json_objects_fill_their_columns_in_one_parse():
    batch = _decode("json", [b'{"user": "a", "amount": 1, "other": [1]}', b'{"amount":\n 2}', b'{}'])
    assert batch.schema == SCHEMA
    assert batch.to_pylist() == [{"user": "a", "amount": 1}, {"user": None, "amount": 2},
                                 {"user": None, "amount": None}]


def test_a_bad_json_payload_fails_with_its_offset_or_becomes_nulls():
    payloads = [b'{"user": "a"}', b"[1, 2]", b'{"amount": "many"}', b"", None]
    with pytest.raises(DecodeError, match="offset 101"):
        _decode("json", payloads)
    assert _decode("json", payloads, errors="null").to_pylist() == [
        {"user": "a", "amount": None}] + [{"user": None, "amount": None}] * 4


def test_text_needs_one_string_column_and_valid_utf8():
    text = pa.schema([("value", pa.string())])
    assert _decode("text", [b"caf\xc3\xa9", None], text).to_pylist() == [{"value": "café"}, {"value": None}]
    with pytest.raises(DecodeError, match="offset 100"):
        _decode("text", [b"\xff"], text)
    with pytest.raises(OptionError, match="one string column"):
        make_decoder("text", SCHEMA, "fail")


def lengths(payloads: pa.Array, schema: pa.Schema) -> pa.RecordBatch:
    """A user's decoder: imported by name, like ``tests.spark.test_decoders:lengths``."""
    import pyarrow.compute as pc
    return pa.RecordBatch.from_arrays([pc.binary_length(payloads)], names=["size"])


def test_a_function_decoder_is_imported_by_name_and_its_columns_cast():
    schema = pa.schema([("size", pa.int64())])
    assert _decode("tests.spark.test_decoders:lengths", [b"ab", b""], schema).to_pylist() == [
        {"size": 2}, {"size": 0}]
    with pytest.raises(OptionError, match="cannot import"):
        make_decoder("tests.spark.nowhere:f", schema, "fail")


def test_a_decoder_needs_columns_and_columns_need_a_decoder():
    with pytest.raises(OptionError, match="no column to fill"):
        make_decoder("json", pa.schema([]), "fail")
    with pytest.raises(OptionError, match="set the option decoder"):
        make_decoder("none", SCHEMA, "fail")
