"""One connection of a listener's factory on Twisted's ``StringTransport``, for unit tests of
the network layer and the handlers behind it (tests/unit/network, tests/unit/handlers):
bytes in, whole response frames out, no sockets."""

from __future__ import annotations

import struct

from twisted.internet.testing import StringTransport


class Peer:
    """One connection of a listener's factory on a StringTransport."""

    def __init__(self, factory) -> None:
        self.transport = StringTransport(peerAddress=_Address("10.1.2.3", 5555))
        self.protocol = factory.buildProtocol(None)
        self.protocol.makeConnection(self.transport)

    def send(self, data: bytes, byte_by_byte: bool = False) -> None:
        if byte_by_byte:
            for i in range(len(data)):
                self.protocol.dataReceived(data[i:i + 1])
        else:
            self.protocol.dataReceived(data)

    def responses(self) -> list[bytes]:
        """The response frames written so far (each without its size), and clear them."""
        data, frames = self.transport.value(), []
        self.transport.clear()
        while data:
            (size,) = struct.unpack_from(">i", data)
            frames.append(data[4:4 + size])
            data = data[4 + size:]
        return frames


class _Address:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
