"""Kafka's per-user configuration in ZooKeeper: the paths and the JSON value (pure).

``/config/users/<sanitized user>`` holds ``{"version":1,"config":{key: text, ...}}``: SCRAM
credentials under their mechanism's name (``SCRAM-SHA-256``: ScramCredentialUtils' text,
security/scram.py), and whatever else Kafka keeps there (quotas: ``producer_byte_rate``...),
which a writer of credentials must keep as it found it. After a change, Kafka's tools add
``/config/changes/config_change_<seq>`` = ``{"version":2,"entity_path":"users/<sanitized>"}``.
The user's name is sanitized as Kafka's Sanitizer does (Java's URLEncoder, with space as
``%20`` and ``*`` as ``%2A``): ``a b`` is ``a%20b``.
"""

from __future__ import annotations

import json
import logging
from urllib.parse import quote, unquote

from twisted_broker.security.scram import SCRAM_HASHES, ScramCredential

log = logging.getLogger(__name__)

CONFIG_USERS = "/config/users"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = f"{CONFIG_CHANGES}/config_change_"


def sanitize_user(name: str) -> str:
    # quote() keeps "~" that URLEncoder escapes; URLEncoder keeps "*", which Kafka then escapes.
    return quote(name, safe="").replace("~", "%7E")


def desanitize_user(node: str) -> str:
    return unquote(node)


def user_path(name: str) -> str:
    return f"{CONFIG_USERS}/{sanitize_user(name)}"


def decode_user_config(value: bytes | None) -> dict[str, str]:
    """The ``config`` map of a user node's value ({} for none). Raises ValueError."""
    if not value:
        return {}
    try:
        data = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    config = data.get("config") if isinstance(data, dict) else None
    if not isinstance(config, dict) or not all(isinstance(v, str) for v in config.values()):
        raise ValueError("no config map of strings")
    return dict(config)


def encode_user_config(config: dict[str, str]) -> bytes:
    return json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()


def encode_change_notification(name: str) -> bytes:
    return encode_entity_change(f"users/{sanitize_user(name)}")


def encode_entity_change(entity_path: str) -> bytes:
    """Kafka's change notification of a config entity (``users/alice``, ``clients/app``,
    ``users/alice/clients/app``: the node's path under /config)."""
    return json.dumps({"version": 2, "entity_path": entity_path}, separators=(",", ":")).encode()


def scram_credentials(user: str, config: dict[str, str]) -> dict[str, ScramCredential]:
    """{mechanism: credential} of a user's config; a credential that does not parse is logged
    and left out (that mechanism then logs nobody in)."""
    found = {}
    for mechanism in SCRAM_HASHES:
        if mechanism in config:
            try:
                found[mechanism] = ScramCredential.from_text(config[mechanism])
            except ValueError as exc:
                log.warning("ignoring %s credential of user %r: %s", mechanism, user, exc)
    return found
