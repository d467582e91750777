"""The 0.7 client connection (network/kafka07_client.py) on Twisted's ``StringTransport``, for
the unit tests of it and of the Twisted-native clients over it: requests out as bytes,
responses fed in by the test, Deferreds' results collected without a reactor."""

from __future__ import annotations

from twisted.internet.testing import StringTransport

from twisted_broker.network.kafka07_client import KafkaClientProtocol


def connected(max_response_bytes: int = 1 << 20) -> tuple[KafkaClientProtocol, StringTransport]:
    protocol, transport = KafkaClientProtocol(max_response_bytes), StringTransport()
    protocol.makeConnection(transport)
    return protocol, transport


def results(d) -> list:
    """The list that receives ``d``'s result or Failure once it fires."""
    out: list = []
    d.addBoth(out.append)
    return out
