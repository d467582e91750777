"""Kafka's ``listeners`` and ``listener.security.protocol.map``: which ports today's clients
connect to, and with which security protocol (docs/security.md, "Listeners").

Pure: parses text into ``ListenerSpec`` values and raises ValueError naming what is wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL = "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"
SECURITY_PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
# NAME://HOST:PORT; HOST may be empty (every interface) or a bracketed IPv6 address.
_LISTENER = re.compile(r"(?P<name>[A-Za-z0-9_.-]+)://(?P<host>\[[0-9A-Fa-f:.]+\]|[^:/\[\]]*):(?P<port>[0-9]+)")


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """One listener of today's clients: ``name`` (Kafka's listener name, what Metadata answers
    are matched by), its ``security_protocol`` (one of SECURITY_PROTOCOLS), where it binds."""

    name: str
    security_protocol: str
    host: str  # "" binds every interface
    port: int  # 0 picks a free port (tests)

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in (SSL, SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in (SASL_PLAINTEXT, SASL_SSL)


def parse_protocol_map(items: tuple[str, ...]) -> dict[str, str]:
    """``NAME:PROTOCOL`` items as {name: protocol}; the four protocol names map to themselves."""
    found = {protocol: protocol for protocol in SECURITY_PROTOCOLS}
    for item in items:
        name, sep, protocol = (part.strip() for part in item.partition(":"))
        if not sep or not name or protocol.upper() not in SECURITY_PROTOCOLS:
            raise ValueError(f"listener.security.protocol.map: {item!r} is not NAME:"
                             + "|".join(SECURITY_PROTOCOLS))
        found[name.upper()] = protocol.upper()
    return found


def parse_listeners(items: tuple[str, ...], protocol_map: tuple[str, ...] = ()) -> tuple[ListenerSpec, ...]:
    """``listeners``' items (``NAME://HOST:PORT``) as ListenerSpecs, in order. Names are
    upper-cased as Kafka does; each must be unique and have a security protocol."""
    protocols = parse_protocol_map(protocol_map)
    specs: list[ListenerSpec] = []
    for item in items:
        match = _LISTENER.fullmatch(item.strip())
        if match is None:
            raise ValueError(f"listeners: {item!r} is not NAME://HOST:PORT")
        name, port = match["name"].upper(), int(match["port"])
        if name not in protocols:
            raise ValueError(f"listeners: {name} has no security protocol "
                             "(name one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, or map it in "
                             "listener.security.protocol.map)")
        if any(spec.name == name for spec in specs):
            raise ValueError(f"listeners: {name} is listed twice")
        if port > 65535:
            raise ValueError(f"listeners: {item!r}: port {port} is above 65535")
        specs.append(ListenerSpec(name, protocols[name], match["host"].strip("[]"), port))
    return tuple(specs)


def endpoint_text(name: str, host: str, port: int) -> str:
    """An endpoint as Kafka's broker registrations write it: ``NAME://host:port``."""
    return f"{name}://{f'[{host}]' if ':' in host else host}:{port}"


def parse_endpoint(text: str) -> tuple[str, str, int]:
    """``(name, host, port)`` of ``NAME://host:port``. Raises ValueError."""
    match = _LISTENER.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not NAME://HOST:PORT")
    return match["name"].upper(), match["host"].strip("[]"), int(match["port"])
