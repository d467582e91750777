"""Who can reach a server endpoint: the rules that keep the debug port on loopback unless it
is protected (docs/security.md, "The debug port").

A Twisted endpoint description is ``TYPE:ARG:...:KEY=VALUE:...`` with ``\\`` escaping a colon
(``tcp:9093:interface=127.0.0.1``, ``ssl:9093:privateKey=k.pem:caCertsDir=ca``). Pure: reads
the text only, binds nothing.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

# The endpoint types whose address is a host's interface; a unix socket is reached through
# the file system (its permissions), never from the network.
NETWORK_TYPES = ("tcp", "tcp6", "ssl")
LOCAL_TYPES = ("unix",)


@dataclass(frozen=True)
class EndpointDescription:
    kind: str
    args: tuple[str, ...] = ()
    options: dict[str, str] = field(default_factory=dict)


def parse_endpoint(description: str) -> EndpointDescription:
    """Split a description as Twisted's serverFromString does (its parser is private)."""
    items, current, escaped = [], [], False
    for char in description:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ":":
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    items.append("".join(current))
    kind, args, options = items[0].lower(), [], {}
    for item in items[1:]:
        key, sep, value = item.partition("=")
        if sep:
            options[key] = value
        else:
            args.append(item)
    if kind.isdigit():  # Twisted's old form "9093" is tcp:9093
        kind, args = "tcp", [items[0], *args]
    return EndpointDescription(kind, tuple(args), options)


def binds_beyond_loopback(description: str) -> bool:
    """Whether a server on ``description`` can be reached from beyond this host: a network
    endpoint without an interface (every interface) or with one that is not a loopback
    address; any endpoint type this rule does not know counts as reachable."""
    endpoint = parse_endpoint(description)
    if endpoint.kind in LOCAL_TYPES:
        return False
    if endpoint.kind not in NETWORK_TYPES:
        return True
    interface = endpoint.options.get("interface", "").strip("[]")
    try:
        return not ipaddress.ip_address(interface).is_loopback
    except ValueError:  # "" (every interface) or a name
        return interface.lower() != "localhost"


def requires_client_certificates(description: str) -> bool:
    """Whether ``description`` is a TLS endpoint that requires client certificates signed by
    the CAs of its ``caCertsDir`` (network/listener_endpoints.py's ``server_endpoint``)."""
    endpoint = parse_endpoint(description)
    return endpoint.kind == "ssl" and bool(endpoint.options.get("caCertsDir"))
