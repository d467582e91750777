"""The security keys of server.properties (docs/security.md): defaults, listeners, refusals."""

from __future__ import annotations

import pytest

from twisted_broker.config import BrokerConfig, ConfigError
from twisted_broker.security.listeners import ListenerSpec

BASE = {"brokerid": "0", "log.dir": "/tmp/x", "enable.zookeeper": "false"}


def config(**keys: str) -> BrokerConfig:
    return BrokerConfig.from_properties({**BASE, **keys})


def test_defaults_keep_one_plaintext_listener_from_kafka_port_and_no_security():
    plain = config(**{"kafka.port": "9094"})
    assert plain.modern_listeners() == (ListenerSpec("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9094),)
    assert plain.sasl_enabled_mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    assert (plain.ssl_client_auth, plain.connection_failed_authentication_delay_ms) == ("none", 100)
    assert plain.security_inter_broker_protocol == "PLAINTEXT"  # the 0.7 port and followers: plain TCP
    assert config().modern_listeners() == ()  # kafka.port=0: no listener, as before


def test_listeners_replace_kafka_port():
    c = config(**{"kafka.port": "9094", "listeners": "SASL_PLAINTEXT://127.0.0.1:9095,PLAINTEXT://:9094"})
    assert [(s.name, s.port) for s in c.modern_listeners()] == [("SASL_PLAINTEXT", 9095), ("PLAINTEXT", 9094)]


@pytest.mark.parametrize("keys, message", [
    ({"listeners": "CLIENT://h:1"}, "no security protocol"),
    ({"listeners": "SSL://h:1"}, "ssl.keystore.certificate.chain"),
    ({"ssl.client.auth": "required"}, "ssl.truststore.certificates"),
    ({"ssl.client.auth": "maybe"}, "must be one of"),
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "GSSAPI not served"),
    ({"connection.failed.authentication.delay.ms": "-1"}, "at least 0"),
    ({"security.inter.broker.protocol": "SSL", "ssl.keystore.certificate.chain": "c", "ssl.keystore.key": "k"},
     "security.inter.broker.protocol=SSL needs"),
    ({"security.inter.broker.protocol": "SASL_SSL"}, "must be one of"),
])
def test_bad_security_settings_are_refused_at_start(keys, message):
    with pytest.raises(ConfigError, match=message):
        config(**keys)
