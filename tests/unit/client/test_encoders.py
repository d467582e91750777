"""serializer.class analogues: DefaultEncoder, StringEncoder, and plugging in a callable."""

import pytest

from twisted_broker.client.encoders import DefaultEncoder, StringEncoder, load_encoder


def test_default_encoder_passes_bytes_like_payloads_through():
    encoder = DefaultEncoder()
    payload = bytearray(b"raw")
    assert encoder(b"raw") == b"raw"
    assert encoder(payload) is payload


def test_default_encoder_refuses_text():
    with pytest.raises(TypeError, match="StringEncoder"):
        DefaultEncoder()("text")


def test_string_encoder_writes_utf8():
    assert StringEncoder()("héllo") == "héllo".encode("utf-8")
    assert StringEncoder("latin-1")("é") == b"\xe9"


def test_string_encoder_refuses_bytes():
    with pytest.raises(TypeError):
        StringEncoder()(b"bytes")


@pytest.mark.parametrize("name, cls", [
    ("kafka.serializer.DefaultEncoder", DefaultEncoder),
    ("kafka.serializer.StringEncoder", StringEncoder),
    ("twisted_broker.client.encoders.StringEncoder", StringEncoder),
])
def test_load_encoder_resolves_0_7_and_python_names(name, cls):
    assert isinstance(load_encoder(name), cls)


def test_load_encoder_accepts_a_callable():
    def encode(value: int) -> bytes:
        return str(value).encode()
    assert load_encoder(encode)(42) == b"42"


def test_load_encoder_refuses_an_unknown_name():
    with pytest.raises(ValueError):
        load_encoder("kafka.serializer.NoSuchEncoder")
