"""Finding where messages start in raw log bytes read from an arbitrary offset
(codec/kafka07/message_search.py): the debug port's tail, the web console's newest page, Spark's splits."""

from __future__ import annotations

import random
import struct

from hypothesis import given, settings, strategies as st

from twisted_broker.codec.kafka07.compression import GZIP, NO_COMPRESSION, SNAPPY
from twisted_broker.codec.kafka07.message import MAGIC_0, make_message
from twisted_broker.codec.kafka07.message_search import entry_is_valid, find_message_start
from twisted_broker.codec.kafka07.message_set import (
    encode_compressed_message_set, encode_message_set, encode_messages, iter_entries,
)


def numbered(count: int) -> list[bytes]:
    return [b"message %04d" % i for i in range(count)]


def entry_starts(data: bytes) -> list[int]:
    return [offset for offset, _next, _message in iter_entries(data)]


def mixed_log(batches: int = 40) -> bytes:
    """Plain, gzip and magic-0 entries in turn, each of 1-4 text payloads of varied size.

    No snappy: short inner sets stay literal in it (see the last test)."""
    kinds = [NO_COMPRESSION, GZIP, MAGIC_0]
    parts = []
    for index in range(batches):
        payloads = [b"payload %d.%d " % (index, n) * (1 + (index * 7 + n) % 11) for n in range(1 + index % 4)]
        kind = kinds[index % len(kinds)]
        if kind == MAGIC_0:
            parts.append(encode_messages([make_message(payload, magic=MAGIC_0) for payload in payloads]))
        else:
            parts.append(encode_compressed_message_set(payloads, kind))
    return b"".join(parts)


# -- chains ending exactly at the end ------------------------------------------------------------

def test_a_window_starting_at_a_boundary_starts_at_zero():
    assert find_message_start(encode_message_set([b"a", b"bb"])) == 0


def test_a_cut_message_at_the_front_is_skipped():
    data = encode_message_set([b"first message", b"second", b"third"])
    first = 4 + 6 + len(b"first message")
    for cut in range(1, first + 1):
        assert find_message_start(data[cut:]) == first - cut
        assert find_message_start(data[cut:], check_every_crc=False) == first - cut


def test_leading_zero_bytes_are_skipped():
    data = encode_message_set(numbered(5))
    assert find_message_start(b"\x00" * 3 + data) == 3


def test_the_chain_must_end_exactly_at_the_end():
    data = encode_message_set(numbered(3))
    assert find_message_start(data + b"\x00\x00") is None  # a partial tail: the end is not a boundary
    assert find_message_start(data[:-1]) is None


def test_a_lookalike_entry_whose_crc_is_wrong_is_refused():
    # A "message" whose length leads exactly to the end but whose CRC is wrong, then a real one.
    fake = struct.pack(">iBBI", 6 + 3, 1, 0, 0xDEADBEEF) + b"xyz"
    assert find_message_start(fake) is None
    assert find_message_start(fake, check_every_crc=False) is None
    assert find_message_start(b"\x00" + encode_message_set([b"ok"])) == 1


def test_a_damaged_message_is_skipped_only_when_every_crc_is_checked():
    data = bytearray(encode_message_set(numbered(4)))
    entry = len(encode_message_set(numbered(1)))
    data[2 * entry - 1] ^= 0xFF  # the second payload no longer matches its CRC
    assert find_message_start(bytes(data)) == 2 * entry  # the chain starts after the damage
    assert find_message_start(bytes(data), check_every_crc=False) == 0  # shows it, crc BAD
    data[-1] ^= 0xFF  # the last one damaged too: no chain of good entries reaches the end
    assert find_message_start(bytes(data)) is None


def test_an_unknown_codec_breaks_the_chain():
    data = bytearray(encode_message_set(numbered(2)))
    data[5] = 3  # codec 3 in the first entry's attributes
    assert find_message_start(bytes(data)) == len(encode_message_set(numbered(1)))


def test_garbage_and_empty_windows_have_no_start():
    assert find_message_start(b"\xff" * 100) is None
    assert find_message_start(b"") is None
    assert find_message_start(b"", partial_tail=True) is None
    rng = random.Random(3)
    for _ in range(20):
        noise = bytes(rng.getrandbits(8) for _ in range(2000))
        assert find_message_start(noise) is None
        assert find_message_start(noise, partial_tail=True) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=20), st.data())
def test_the_first_true_boundary_after_any_cut_is_found(payloads, data):
    encoded = encode_message_set(payloads)
    boundaries = entry_starts(encoded)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    following = [b - cut for b in boundaries if b >= cut]
    expected = following[0] if following else None  # cut inside the last message: no whole one
    assert find_message_start(encoded[cut:]) == expected
    assert find_message_start(encoded[cut:], check_every_crc=False) == expected


def test_a_window_of_large_messages_is_searched_in_linear_time():
    # Many plausible-looking positions (zero bytes) inside large payloads: each is walked once.
    data = encode_message_set([b"\x00\x00\x00\x09\x01" * 100_000 for _ in range(3)])
    assert find_message_start(data[7:]) == len(data) // 3 - 7


# -- windows cut by a fetch's max_size --------------------------------------------------------------

def test_a_partial_tail_is_accepted_when_asked_for():
    data = encode_message_set(numbered(3))
    entry = len(encode_message_set(numbered(1)))
    for cut in range(1, entry):
        assert find_message_start(data[:-cut], partial_tail=True) == 0
    assert find_message_start(data[3:-3], partial_tail=True) == entry - 3


def test_a_partial_tail_needs_one_complete_entry_first():
    data = encode_message_set(numbered(1))
    assert find_message_start(data[:-1], partial_tail=True) is None


def test_a_partial_tail_with_an_impossible_magic_is_refused():
    data = encode_message_set(numbered(2))
    entry = len(encode_message_set(numbered(1)))
    cut = bytearray(data[:entry + 6])
    cut[entry + 4] = 7  # the cut entry's magic byte
    assert find_message_start(bytes(cut), partial_tail=True) is None


def test_the_next_entry_is_found_from_any_position_of_a_mixed_log():
    data = mixed_log()
    starts = entry_starts(data) + [len(data)]
    for position in range(0, len(data) - 1, 3):
        expected = next(start for start in starts if start >= position)
        window = data[position:position + 2048]
        if expected >= len(data) or not any(s > expected for s in starts if s <= position + len(window)):
            continue  # no complete entry after the start inside the window: nothing to confirm
        assert position + find_message_start(window, partial_tail=True) == expected, position


# -- one entry -------------------------------------------------------------------------------------

def test_entry_is_valid_checks_framing_and_crc():
    data = encode_message_set([b"one", b"two"])
    assert entry_is_valid(data) and entry_is_valid(data, 13)
    assert not entry_is_valid(data, 1)
    assert not entry_is_valid(data[:12])  # cut
    damaged = bytearray(data)
    damaged[12] ^= 0xFF
    assert not entry_is_valid(bytes(damaged))


def test_a_payload_holding_a_message_set_can_pass_for_a_start():
    # The known limit: snappy keeps a short inner set as literal bytes at the wrapper's end,
    # so its inner entries, followed by the true chain, look like a start (Spark's range
    # readers then fail the query rather than split there; tail shows the inner entries).
    inner = encode_message_set([b"first inner", b"last inner"])
    wrapper = encode_compressed_message_set([b"first inner", b"last inner"], SNAPPY)
    assert wrapper.endswith(inner)
    data = wrapper + encode_message_set([b"after"])
    assert find_message_start(data[1:]) == len(wrapper) - len(inner) - 1
