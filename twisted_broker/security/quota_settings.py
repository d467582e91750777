"""The broker's keys for client quotas and connections per address (docs/security.md,
"Quotas"), Kafka's names and defaults: a part of config.py's BrokerConfig, kept here so that
config.py stays within its 400 lines. config.py's table reads these fields as its own (the
key is the name with dots; ``min`` is checked; a ``host:count`` map skips bad tokens)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from twisted_broker.security.quota import DEFAULT_WINDOW_NUM, DEFAULT_WINDOW_SIZE_SECONDS

UNLIMITED_CONNECTIONS = 2_147_483_647  # Kafka's default max.connections.per.ip, Integer.MAX_VALUE


@dataclass(frozen=True, kw_only=True)
class QuotaSettings:
    quota_window_num: int = field(default=DEFAULT_WINDOW_NUM, metadata={"min": 2})
    quota_window_size_seconds: int = field(default=DEFAULT_WINDOW_SIZE_SECONDS, metadata={"min": 1})
    max_connections_per_ip: int = field(default=UNLIMITED_CONNECTIONS, metadata={"min": 1})
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
