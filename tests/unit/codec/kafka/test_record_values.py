"""record_values: a batch's values read by the compiled module (mypyc, built by make) and by
its Python source, on the same batches (issue 24: the compiled one is what the broker runs,
the source is the reference and what runs without the build)."""

from __future__ import annotations

import importlib.util

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twisted_broker.codec.kafka import record_values
from twisted_broker.codec.kafka.batch_header import read_header
from twisted_broker.codec.kafka.record_batch import build_batch, records_bytes
from twisted_broker.codec.kafka07.message_set import encode_message_set

_spec = importlib.util.spec_from_file_location("record_values_source", record_values.__file__.split(".")[0] + ".py")
source = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(source)
IMPLEMENTATIONS = [pytest.param(record_values, id="compiled"), pytest.param(source, id="source")]

maybe_bytes = st.one_of(st.none(), st.binary(max_size=300))
header = st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5)))
record = st.tuples(st.integers(0, 2**40), maybe_bytes, maybe_bytes, st.lists(header, max_size=2))


def records_of(batch: bytes) -> tuple[bytes, int]:
    head = read_header(batch)
    return bytes(records_bytes(batch, head, 1 << 30)), head.records_count


def test_make_builds_the_compiled_module_and_python_imports_it_first():
    assert record_values.__file__.endswith(".so"), record_values.__file__


@given(st.lists(record, min_size=1, max_size=40))
def test_both_read_each_records_value_in_order(records):
    data, count = records_of(build_batch([tuple(r[:3]) + (tuple(r[3]),) for r in records]))
    expected = [value for _ts, _key, value, _headers in records]
    assert record_values.values_of(data, count) == source.values_of(data, count) == expected


@pytest.mark.parametrize("module", IMPLEMENTATIONS)
def test_long_varints_take_the_general_path(module):
    value = b"v" * 70_000  # a 3-byte value length, a 3-byte record length
    data, count = records_of(build_batch([(0, b"k" * 9000, value, ())]))
    assert module.values_of(data, count) == [value]


@pytest.mark.parametrize("module", IMPLEMENTATIONS)
@pytest.mark.parametrize("damage, overrun", [
    (lambda data: data[:-1], False),  # cut short inside the last record: IndexError
    (lambda data: data + b"\x00", True),  # a byte after the last record
    (lambda data: b"\x7f" + data[1:], True),  # a record length past the end
], ids=["cut-short", "trailing-byte", "length-past-the-end"])
def test_both_refuse_damaged_records_the_same_way(module, damage, overrun):
    data, count = records_of(build_batch([(0, None, b"abc", ()), (1, b"k", b"defg", ())]))
    with pytest.raises(module.RecordsOverrun if overrun else (IndexError, module.RecordsOverrun)):
        module.values_of(damage(data), count)


@given(st.lists(maybe_bytes, max_size=20))
def test_both_write_the_values_as_the_0_7_message_set_encode_message_set_writes(values):
    expected = encode_message_set([b"" if value is None else value for value in values])
    assert record_values.values_message_set(values) == source.values_message_set(values) == expected
