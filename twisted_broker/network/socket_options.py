"""Socket options of the broker's client connections: no Nagle delay, 0.7's buffer sizes."""

from __future__ import annotations

import socket


def set_socket_options(transport, send_buffer_bytes: int | None, receive_buffer_bytes: int | None) -> None:
    """TCP_NODELAY, and SO_SNDBUF/SO_RCVBUF when given (socket.send.buffer and
    socket.receive.buffer); nothing for a transport without a socket (tests)."""
    # Under TLS the transport wraps the TCP connection, whose socket takes the options.
    transport = getattr(transport, "transport", None) or transport
    handle = getattr(transport, "getHandle", None)
    sock = handle() if handle is not None else None
    if isinstance(sock, socket.socket):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if send_buffer_bytes:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)
        if receive_buffer_bytes:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
