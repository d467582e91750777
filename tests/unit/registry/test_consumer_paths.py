"""Consumer group paths, identifiers and values (spec 5.2, 5.3, V10), as registry/paths.py has them."""

import re
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twisted_broker.registry import paths
from twisted_broker.registry.paths import StaticSubscription, WildcardSubscription

topics = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", min_size=1, max_size=20)
UUID_4F3A = uuid.UUID("4f3a9b2c-1d2e-4f00-8a00-000000000000")


# -- V10 -------------------------------------------------------------------------------------

def test_v10_consumer_registration_decodes_and_encodes_byte_for_byte():
    assert paths.decode_subscription(b'{ "test": 2 }') == StaticSubscription({"test": 2})
    assert StaticSubscription({"test": 2}).encode() == b'{ "test": 2 }'


def test_v10_owner_value_is_the_thread_id_of_a_generated_consumer_id():
    consumer_id = paths.consumer_id("grp", consumerid=None, hostname="host", now_ms=1354094518123, uuid=UUID_4F3A)
    assert paths.encode_owner(paths.thread_id(consumer_id, 1)) == b"grp_host-1354094518123-4f3a9b2c-1"
    assert paths.decode_owner(b"grp_host-1354094518123-4f3a9b2c-1") == "grp_host-1354094518123-4f3a9b2c-1"


def test_v10_offset_is_decimal_text():
    assert paths.encode_offset(15) == b"15"
    assert paths.decode_offset(b"15") == 15


# -- registration values -----------------------------------------------------------------------

def test_static_registration_with_two_topics_has_0_7s_exact_spacing():
    assert StaticSubscription({"t1": 2, "t2": 1}).encode() == b'{ "t1": 2,"t2": 1 }'


def test_empty_static_registration_is_an_empty_object():
    assert StaticSubscription({}).encode() == b"{  }"
    assert paths.decode_subscription(b"{  }") == StaticSubscription({})


@pytest.mark.parametrize("value", [
    b'{"test":2}',
    b'{ "test" : 2 }',
    b'{\n  "test": 2\n}\n',
    b'{\t"test":\t2\r\n}',
    b'\x0c{ "test":\x0b2 }',   # form feed, vertical tab: whitespace to 0.7's lexer, not to JSON
])
def test_registration_json_tolerates_whitespace_as_0_7s_parser_does(value):
    assert paths.decode_subscription(value) == StaticSubscription({"test": 2})


def test_repeated_topic_keeps_its_last_count_as_scala_to_map():
    assert paths.decode_subscription(b'{ "t": 1,"t": 3 }') == StaticSubscription({"t": 3})


@pytest.mark.parametrize("value", [
    b'{ "test": 2.0 }',        # 0.7 parsed numbers with toInt
    b'{ "test": 1e2 }',
    b'{ "test": "2" }',
    b'{ "test": true }',
    b'{ "test": null }',
    b'{ "test": 0 }',          # 0.7 asserted at least one stream
    b'{ "test": -1 }',
    b'{ "test": 2147483648 }',  # not an int
    b'{ "test": [2] }',
    b'[ "test" ]',
    b'{ "test": 2 ',
    b'',
    b'test',
    b'\xff',
])
def test_malformed_registration_raises_value_error(value):
    with pytest.raises(ValueError):
        paths.decode_subscription(value)


def test_whitelist_and_blacklist_registrations():
    assert WildcardSubscription(True, 2, "logs-.*").encode() == b"*2*logs-.*"
    assert WildcardSubscription(False, 1, "internal|tmp").encode() == b"!1!internal|tmp"
    assert paths.decode_subscription(b"*2*logs-.*") == WildcardSubscription(True, 2, "logs-.*")
    assert paths.decode_subscription(b"!1!internal|tmp") == WildcardSubscription(False, 1, "internal|tmp")


def test_wildcard_regex_may_contain_the_markers_and_be_empty():
    assert paths.decode_subscription(b"*3*a*b!c") == WildcardSubscription(True, 3, "a*b!c")
    assert paths.decode_subscription(b"!1!") == WildcardSubscription(False, 1, "")


@pytest.mark.parametrize("value", [b"*x*a", b"*2a", b"**a", b"*2*a\nb", b"!2*a", b"!!a", b"*0*a",
                                   b"*99999999999*a"])
def test_malformed_wildcard_registration_raises_value_error(value):
    with pytest.raises(ValueError):
        paths.decode_subscription(value)


@given(st.dictionaries(topics, st.integers(1, 2**31 - 1), max_size=6))
def test_static_registration_round_trips_in_order(counts):
    decoded = paths.decode_subscription(StaticSubscription(counts).encode())
    assert list(decoded.topic_counts.items()) == list(counts.items())


@given(whitelist=st.booleans(), streams=st.integers(1, 2**31 - 1),
       regex=st.text(st.characters(blacklist_characters="\n\r\x85\u2028\u2029", blacklist_categories=("Cs",))))
def test_wildcard_registration_round_trips(whitelist, streams, regex):
    subscription = WildcardSubscription(whitelist, streams, regex)
    assert paths.decode_subscription(subscription.encode()) == subscription


def test_stream_counts_below_one_are_refused_when_building():
    with pytest.raises(ValueError):
        StaticSubscription({"t": 0})
    with pytest.raises(ValueError):
        WildcardSubscription(True, 0, "t")


# -- offsets ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, offset", [(b"0", 0), (b"15", 15), (b"+15", 15), (b"-1", -1),
                                           (b"9223372036854775807", 2**63 - 1)])
def test_offset_decodes_as_long_parse_long(value, offset):
    assert paths.decode_offset(value) == offset


@pytest.mark.parametrize("value", [b"", b" 15", b"15\n", b"1_5", b"15.0", b"0x0f", b"9223372036854775808", b"\xff"])
def test_offset_that_long_parse_long_refuses_raises_value_error(value):
    with pytest.raises(ValueError):
        paths.decode_offset(value)


@given(st.integers(0, 2**63 - 1))
def test_offset_round_trips(offset):
    assert paths.decode_offset(paths.encode_offset(offset)) == offset


# -- paths and identifiers ---------------------------------------------------------------------------

def test_consumer_paths_follow_the_spec_table():
    assert paths.consumer_group_path("g") == "/consumers/g"
    assert paths.consumer_ids_path("g") == "/consumers/g/ids"
    assert paths.consumer_id_path("g", "g_h-1-abcdef01") == "/consumers/g/ids/g_h-1-abcdef01"
    assert paths.owners_path("g", "t") == "/consumers/g/owners/t"
    assert paths.owner_path("g", "t", "10-3") == "/consumers/g/owners/t/10-3"
    assert paths.offsets_path("g", "t") == "/consumers/g/offsets/t"
    assert paths.offset_path("g", "t", "10-3") == "/consumers/g/offsets/t/10-3"


def test_partition_names_round_trip():
    assert paths.partition_name(10, 3) == "10-3"
    assert paths.parse_partition_name("10-3") == (10, 3)


@pytest.mark.parametrize("name", ["", "10", "10-", "-3", "a-3", "10-3-1", "10--3", "١-٣"])
def test_malformed_partition_name_raises_value_error(name):
    with pytest.raises(ValueError):
        paths.parse_partition_name(name)


def test_generated_consumer_id_is_group_host_ms_and_8_hex():
    consumer_id = paths.consumer_id("grp", consumerid=None, hostname="web-1.example", now_ms=1354094518123,
                                    uuid=uuid.uuid4())
    assert re.fullmatch(r"grp_web-1\.example-1354094518123-[0-9a-f]{8}", consumer_id)


def test_consumerid_config_replaces_everything_after_the_group():
    assert paths.consumer_id("grp", consumerid="fixed", hostname="h", now_ms=1, uuid=UUID_4F3A) == "grp_fixed"


def test_uuid_prefix_is_javas_unpadded_hex_of_the_high_64_bits():
    assert paths.uuid_prefix(UUID_4F3A) == "4f3a9b2c"
    # Long.toHexString drops leading zeros, so a UUID starting 00... yields later digits.
    assert paths.uuid_prefix(uuid.UUID("00f3a9b2-c1d2-4e00-8000-000000000000")) == "f3a9b2c1"


def test_thread_id_is_consumer_id_dash_index():
    assert paths.thread_id("grp_host-1-4f3a9b2c", 0) == "grp_host-1-4f3a9b2c-0"
    assert paths.thread_id("grp_host-1-4f3a9b2c", 12) == "grp_host-1-4f3a9b2c-12"
