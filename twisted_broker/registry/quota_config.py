"""Kafka's client-quota config entities in ZooKeeper: their paths and values (pure).

An entity is ``(user, client id)``, each a name, ``<default>`` or None (not named):

    /config/users/<user>                        (alice, None)
    /config/users/<user>/clients/<client-id>    (alice, app)
    /config/clients/<client-id>                 (None, app)

holding ``{"version":1,"config":{"producer_byte_rate":"1048576",...}}`` (user_config.py's JSON;
a user's node also holds its SCRAM credentials). ``entity_path`` is the path under /config, as
Kafka's change notifications name it (``users/alice/clients/app``). Names are sanitized as
Kafka's Sanitizer does; ``<default>`` is written as is.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from twisted_broker.registry.user_config import desanitize_user, sanitize_user
from twisted_broker.security.quota import DEFAULT, QUOTA_KEYS, Entity, parse_rate

log = logging.getLogger(__name__)

CONFIG_CLIENTS = "/config/clients"


def _node(name: str) -> str:
    return name if name == DEFAULT else sanitize_user(name)


def _name(node: str) -> str:
    return node if node == DEFAULT else desanitize_user(node)


def entity_path(entity: Entity) -> str:
    """``users/alice``, ``users/alice/clients/app``, ``clients/<default>``: the node under /config."""
    user, client_id = entity
    if user is None and client_id is None:
        raise ValueError("an entity names a user, a client id or both")
    if user is None:
        return f"clients/{_node(client_id)}"
    return f"users/{_node(user)}" + ("" if client_id is None else f"/clients/{_node(client_id)}")


def entity_of(path: str) -> Entity:
    """The entity of a path under /config (a change notification's). Raises ValueError."""
    parts = path.split("/")
    if len(parts) == 2 and parts[0] == "clients" and parts[1]:
        return None, _name(parts[1])
    if len(parts) in (2, 4) and parts[0] == "users" and parts[1]:
        if len(parts) == 2:
            return _name(parts[1]), None
        if parts[2] == "clients" and parts[3]:
            return _name(parts[1]), _name(parts[3])
    raise ValueError(f"{path!r} is not a users or clients entity")


def quota_values(where: str, config: Mapping[str, str]) -> dict[str, float]:
    """The quota keys of an entity's config, parsed; a bad one is logged (WARNING) and left out."""
    found = {}
    for key in QUOTA_KEYS:
        if key in config:
            try:
                found[key] = parse_rate(config[key])
            except ValueError as exc:
                log.warning("ignoring %s of %s: %s", key, where, exc)
    return found


CHANGE_NODE_PREFIX = "config_change_"


def config_change_sequence(child: str) -> int:
    """The sequence number of a /config/changes child (-1 for a name that is not one)."""
    suffix = child[len(CHANGE_NODE_PREFIX):] if child.startswith(CHANGE_NODE_PREFIX) else ""
    return int(suffix) if suffix.isdigit() else -1


def decode_entity_change(value: bytes) -> str:
    """The ``entity_path`` of a version 2 change notification. Raises ValueError."""
    try:
        data = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("version") != 2 or not isinstance(data.get("entity_path"), str):
        raise ValueError("not a version 2 notification with an entity_path")
    return data["entity_path"]
