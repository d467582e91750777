"""Kafka's ``max.connections.per.ip`` and ``max.connections.per.ip.overrides`` (docs/security.md,
"Connections per address"): how many connections one address may hold open over every Kafka
listener together, and when a refusal is worth a log line. Pure: fed hosts and times.
"""

from __future__ import annotations

from collections.abc import Mapping

WARNING_INTERVAL_S = 60.0  # one WARNING per address per minute at most, whatever the flood


class ConnectionLimits:
    """Open connections per address against their limit. ``admit`` before accepting one,
    ``opened`` / ``closed`` as connections come and go (reactor thread only)."""

    def __init__(self, max_per_ip: int, overrides: Mapping[str, int]) -> None:
        self._max, self._overrides = max_per_ip, dict(overrides)
        self.open: dict[str, int] = {}
        self.refused = 0  # connections refused since the start
        self._warned: dict[str, tuple[float, int]] = {}  # host -> (last WARNING's time, refused since)

    def limit(self, host: str) -> int:
        return self._overrides.get(host, self._max)

    def admit(self, host: str) -> bool:
        """Whether a new connection from ``host`` fits; a refusal is counted."""
        if self.open.get(host, 0) < self.limit(host):
            return True
        self.refused += 1
        return False

    def opened(self, host: str) -> None:
        self.open[host] = self.open.get(host, 0) + 1

    def closed(self, host: str) -> None:
        count = self.open.get(host, 0) - 1
        if count > 0:
            self.open[host] = count
        else:
            self.open.pop(host, None)

    def warning_due(self, host: str, now_s: float) -> int | None:
        """After a refusal: None to stay quiet, else how many refusals from ``host`` went
        unlogged before this one (the first one is logged at once)."""
        last = self._warned.get(host)
        if last is not None and now_s - last[0] < WARNING_INTERVAL_S:
            self._warned[host] = (last[0], last[1] + 1)
            return None
        if len(self._warned) > 10_000:  # a flood from many addresses: forget the old ones
            self._warned = {h: w for h, w in self._warned.items() if now_s - w[0] < WARNING_INTERVAL_S}
        self._warned[host] = (now_s, 0)
        return 0 if last is None else last[1]
