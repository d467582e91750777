"""Who can reach a server endpoint (security/endpoint_exposure.py): the debug port's rule."""

import pytest

from twisted_broker.security.endpoint_exposure import (
    binds_beyond_loopback, parse_endpoint, requires_client_certificates,
)


def test_a_description_splits_as_twisted_splits_it_escaped_colons_kept():
    endpoint = parse_endpoint(r"tcp6:9093:interface=\:\:1:backlog=5")
    assert (endpoint.kind, endpoint.args, endpoint.options) == ("tcp6", ("9093",), {"interface": "::1", "backlog": "5"})
    assert parse_endpoint("9093").kind == "tcp"  # Twisted's bare-port form


@pytest.mark.parametrize("description", [
    "tcp:9093:interface=127.0.0.1", "tcp:0:interface=127.8.9.10", r"tcp6:0:interface=\:\:1",
    "tcp:9093:interface=localhost", "ssl:9093:privateKey=k.pem:interface=127.0.0.1", "unix:/run/tb/debug.sock"])
def test_loopback_and_unix_endpoints_stay_on_this_host(description):
    assert not binds_beyond_loopback(description)


@pytest.mark.parametrize("description", [
    "tcp:9093", "tcp:9093:interface=0.0.0.0", r"tcp6:9093:interface=\:\:", "tcp:9093:interface=10.1.2.3",
    "ssl:9093:privateKey=k.pem", "9093", "tcp:9093:interface=broker.example.com", "systemd:domain=INET:index=0"])
def test_every_interface_an_address_beyond_loopback_and_unknown_types_are_reachable(description):
    assert binds_beyond_loopback(description)


def test_only_an_ssl_endpoint_with_ca_certificates_requires_client_certificates():
    assert requires_client_certificates("ssl:9093:privateKey=k.pem:caCertsDir=/etc/tb/ca")
    assert not requires_client_certificates("ssl:9093:privateKey=k.pem")
    assert not requires_client_certificates("tcp:9093:caCertsDir=/etc/tb/ca")
