"""Kafka's ``listeners`` and ``listener.security.protocol.map``, parsed."""

from __future__ import annotations

import pytest

from twisted_broker.security.listeners import ListenerSpec, endpoint_text, parse_endpoint, parse_listeners


def test_the_four_protocol_names_need_no_map():
    specs = parse_listeners(("PLAINTEXT://127.0.0.1:9094", "SASL_PLAINTEXT://127.0.0.1:9095",
                             "sasl_ssl://:9096", "SSL://[::1]:9097"))
    assert specs == (ListenerSpec("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9094),
                     ListenerSpec("SASL_PLAINTEXT", "SASL_PLAINTEXT", "127.0.0.1", 9095),
                     ListenerSpec("SASL_SSL", "SASL_SSL", "", 9096),
                     ListenerSpec("SSL", "SSL", "::1", 9097))
    assert [(s.uses_tls, s.uses_sasl) for s in specs] == [(False, False), (False, True), (True, True), (True, False)]


def test_other_names_take_their_protocol_from_the_map():
    (spec,) = parse_listeners(("CLIENT://h:1",), ("CLIENT:SASL_SSL", "REPLICATION:SSL"))
    assert spec == ListenerSpec("CLIENT", "SASL_SSL", "h", 1)


@pytest.mark.parametrize("listeners, protocol_map", [
    (("CLIENT://h:1",), ()), (("PLAINTEXT://h:1", "PLAINTEXT://h:2"), ()), (("PLAINTEXT:h:1",), ()),
    (("PLAINTEXT://h:99999",), ()), (("PLAINTEXT://h:1",), ("CLIENT=SSL",)), (("C://h:1",), ("C:TLS",)),
])
def test_bad_listeners_raise_value_error(listeners, protocol_map):
    with pytest.raises(ValueError):
        parse_listeners(listeners, protocol_map)


def test_endpoints_round_trip():
    assert parse_endpoint(endpoint_text("SASL_SSL", "127.0.0.1", 9096)) == ("SASL_SSL", "127.0.0.1", 9096)
    assert parse_endpoint(endpoint_text("SSL", "::1", 1)) == ("SSL", "::1", 1)
