"""mirror's pieces: entries re-framed byte for byte, and a stable source-to-target partition map."""

import zlib

from twisted_broker.cli import main
from twisted_broker.tools.mirror import entry_bytes, target_index
from twisted_broker.codec.kafka07.compression import GZIP, SNAPPY
from twisted_broker.codec.kafka07.message import MAGIC_0
from twisted_broker.codec.kafka07.message_set import encode_compressed_message_set, encode_message_set, iter_entries


def test_entries_are_reframed_exactly_as_stored():
    data = (encode_message_set([b"plain"]) + encode_compressed_message_set([b"a", b"b"], GZIP)
            + encode_compressed_message_set([b"c"], SNAPPY) + encode_message_set([b"old"], magic=MAGIC_0))
    bad_crc = bytearray(encode_message_set([b"kept as is"]))
    bad_crc[7] ^= 1
    data += bytes(bad_crc)
    assert b"".join(entry_bytes(message) for _o, _n, message in iter_entries(data)) == data


def test_a_source_partition_always_maps_to_the_same_target_partition():
    assert target_index("t", "0-1", 5) == zlib.crc32(b"t/0-1") % 5
    assert {target_index("t", f"{b}-{p}", 3) for b in range(4) for p in range(4)} == {0, 1, 2}
    assert target_index("t", "0-0", 1) == 0


def test_a_bad_regex_is_a_one_line_error(capsys):
    assert main(["mirror", "--from-zk", "h:1", "--to-broker-list", "0:h:1", "--whitelist", "a(b"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("twisted-broker: error: a(b is an invalid regex") and err.count("\n") == 1
