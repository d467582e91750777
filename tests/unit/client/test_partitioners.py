"""DefaultPartitioner and Java's hash codes (spec 5.6: ``abs(key.hashCode) % n``)."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twisted_broker.client.partitioners import (
    DefaultPartitioner, java_bytes_hashcode, java_hashcode, java_string_hashcode, load_partitioner,
)


def reference_string_hashcode(value: str) -> int:
    """String.hashCode written as its definition, s[0]*31^(n-1) + ... + s[n-1], then to int32."""
    data = value.encode("utf-16-be", "surrogatepass")
    units = [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]
    total = sum(unit * 31 ** (len(units) - 1 - i) for i, unit in enumerate(units)) % 2 ** 32
    return total - 2 ** 32 if total >= 2 ** 31 else total


@pytest.mark.parametrize("value, expected", [
    ("", 0),
    ("a", 97),
    ("hello", 99162322),
    ("Aa", 2112), ("BB", 2112),                 # Java's classic collision
    ("hello world", 1794106052),
    ("abcdefg", -1206291356),
    ("polygenelubricants", -2 ** 31),           # Integer.MIN_VALUE: Math.abs keeps it negative
    ("\U0001F600", 0xD83D * 31 + 0xDE00),        # outside the BMP: the surrogate pair is hashed
    ("é", 0xE9),
])
def test_java_string_hashcode_matches_java(value, expected):
    assert java_string_hashcode(value) == expected


@given(st.text(max_size=40))
def test_java_string_hashcode_equals_its_definition(value):
    assert java_string_hashcode(value) == reference_string_hashcode(value)


def test_a_negative_hash_is_taken_absolute():
    assert DefaultPartitioner()("abcdefg", 7) == 1206291356 % 7  # hashCode -1206291356


def test_integer_min_value_gets_a_valid_partition():
    # Java's Math.abs(MIN_VALUE) % 3 is -2 (0.7 then failed); ours is 2**31 % 3.
    assert DefaultPartitioner()("polygenelubricants", 3) == 2


@pytest.mark.parametrize("value, expected", [
    (b"", 1),
    (b"\x00", 31),
    (b"\x01\x02\x03", 30817),   # ((31 + 1) * 31 + 2) * 31 + 3
    (b"\xff", 30),              # Java bytes are signed: -1
])
def test_bytes_keys_hash_as_java_arrays_hashcode(value, expected):
    assert java_bytes_hashcode(value) == expected
    assert java_hashcode(bytearray(value)) == expected


def test_int_keys_hash_as_java_integers():
    assert java_hashcode(5) == 5
    assert java_hashcode(2 ** 31) == -2 ** 31


def test_other_key_types_are_refused():
    with pytest.raises(TypeError):
        java_hashcode(1.5)


def test_default_partitioner_is_deterministic_for_a_key():
    partitioner = DefaultPartitioner()
    assert partitioner("hello", 4) == 99162322 % 4
    assert {partitioner("hello", 4) for _ in range(20)} == {99162322 % 4}


def test_default_partitioner_picks_at_random_for_no_key():
    partitioner = DefaultPartitioner(random.Random(1))
    seen = {partitioner(None, 4) for _ in range(200)}
    assert seen == {0, 1, 2, 3}


def test_load_partitioner_maps_the_java_default_and_resolves_dotted_names():
    assert isinstance(load_partitioner("kafka.producer.DefaultPartitioner"), DefaultPartitioner)
    assert isinstance(load_partitioner("twisted_broker.client.partitioners.DefaultPartitioner"),
                      DefaultPartitioner)
    assert load_partitioner("builtins.min") is min  # a function is used as it is


def test_load_partitioner_accepts_a_callable():
    def first(key, num_partitions):
        return 0
    assert load_partitioner(first) is first


@pytest.mark.parametrize("name", ["NoDots", "no_such_module_xyz.Partitioner",
                                  "twisted_broker.client.partitioners.Missing"])
def test_load_partitioner_refuses_unresolvable_names(name):
    with pytest.raises(ValueError):
        load_partitioner(name)


def test_load_partitioner_refuses_what_is_not_callable():
    with pytest.raises(TypeError):
        load_partitioner("twisted_broker.client.partitioners.JAVA_PARTITIONERS")
