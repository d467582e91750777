"""Client quotas' rules (docs/security.md, "Quotas"): Kafka's sampled rate, its throttle time,
and which config entity's quota holds a request. Pure: fed ``(now, bytes)``, no clock, no I/O.

How this works (Kafka's ClientQuotaManager over its metrics' ``Rate`` and ``SampledStat``):

- A ``Rate`` keeps ``samples`` windows of ``window_ms``. A record adds to the current sample;
  once that sample is a window old a new one starts (recycling the oldest slot). Samples
  older than the whole span (``samples × window_ms``) count nothing.
- Its value is the samples' sum over the time since the oldest sample started, counted as at
  least ``samples - 1`` whole windows, so a client's first request is not judged over a few
  milliseconds.
- After a record, a rate O above the quota T throttles for ``(O - T) / T × window``: the delay
  that brings O back to T if nothing more is sent. Capped here at the whole span (Kafka caps
  only its request-time quotas): docs/security.md says why.
- Entities: the first of Kafka's eight (``PRECEDENCE``) that sets the key gives both the limit
  and the rate's key, so that a user quota is one rate for all that user's client ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

DEFAULT = "<default>"  # Kafka's ConfigEntityName.Default: the entity every name falls back to
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE)
DEFAULT_WINDOW_NUM = 11  # quota.window.num: 10 whole windows and the current one
DEFAULT_WINDOW_SIZE_SECONDS = 1  # quota.window.size.seconds
IDLE_EXPIRY_S = 3600.0  # a rate unused this long is forgotten (Kafka's sensors' expiry)

# An entity is (user, client id): a name, DEFAULT, or None (the level does not name it).
Entity = tuple[str | None, str | None]


class Rate:
    """Kafka's ``Rate`` over a ``SampledTotal``: bytes per second over a sliding window."""

    __slots__ = ("_samples", "_window_ms", "_starts", "_values", "_current")

    def __init__(self, samples: int, window_ms: float, now_ms: float) -> None:
        if samples < 2 or window_ms <= 0:
            raise ValueError("a rate needs at least 2 samples of a positive window")
        self._samples, self._window_ms = samples, window_ms
        self._starts = [now_ms]  # each sample's start (lastWindowMs)
        self._values = [0.0]
        self._current = 0

    def record(self, value: float, now_ms: float) -> None:
        if now_ms - self._starts[self._current] >= self._window_ms:
            self._current = (self._current + 1) % self._samples
            if self._current >= len(self._starts):
                self._starts.append(now_ms)
                self._values.append(0.0)
            else:
                self._starts[self._current], self._values[self._current] = now_ms, 0.0
        self._values[self._current] += value

    def _purge(self, now_ms: float) -> None:
        span = self._samples * self._window_ms
        for i, start in enumerate(self._starts):
            if now_ms - start >= span:
                self._starts[i], self._values[i] = now_ms, 0.0

    def window_size_ms(self, now_ms: float) -> float:
        """The span the rate divides by: since the oldest sample, at least samples - 1 windows."""
        self._purge(now_ms)
        elapsed = now_ms - min(self._starts)
        full = int(elapsed // self._window_ms)
        if full < self._samples - 1:
            elapsed += (self._samples - 1 - full) * self._window_ms
        return elapsed

    def measure(self, now_ms: float) -> float:
        """Bytes per second now."""
        window = self.window_size_ms(now_ms)
        return sum(self._values) / (window / 1000) if window > 0 else 0.0


def throttle_time_ms(observed: float, quota: float, window_ms: float, cap_ms: float) -> int:
    """Kafka's ``(O - T) / T × W`` in whole ms, capped at ``cap_ms``; 0 when within the quota."""
    if observed <= quota:
        return 0
    return int(min(round((observed - quota) / quota * window_ms), cap_ms))


def precedence(user: str, client_id: str) -> tuple[tuple[Entity, Entity], ...]:
    """Kafka's eight levels, most specific first: (the entity whose config is read, the key of
    the rate it holds the request to)."""
    return (((user, client_id), (user, client_id)),
            ((user, DEFAULT), (user, client_id)),
            ((user, None), (user, "")),
            ((DEFAULT, client_id), (user, client_id)),
            ((DEFAULT, DEFAULT), (user, client_id)),
            ((DEFAULT, None), (user, "")),
            ((None, client_id), ("", client_id)),
            ((None, DEFAULT), ("", client_id)))


def parse_rate(text: str) -> float:
    """A quota's value as Kafka's config stores it (a string): a positive number. Raises ValueError."""
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{text!r}: a quota is a positive number of bytes per second")
    return value


class ClientQuotas:
    """One quota type's rates (``key``: PRODUCER_BYTE_RATE or CONSUMER_BYTE_RATE).
    ``set_entity`` / ``replace_all`` from the ZooKeeper
    cache; ``record`` per request. Times are seconds."""

    def __init__(self, key: str, *, window_num: int = DEFAULT_WINDOW_NUM,
                 window_size_seconds: int = DEFAULT_WINDOW_SIZE_SECONDS) -> None:
        self.key = key
        self._samples, self._window_ms = window_num, window_size_seconds * 1000.0
        self._cap_ms = window_num * self._window_ms
        self._limits: dict[Entity, float] = {}  # the entities that set this key
        self._rates: dict[Entity, list] = {}  # rate key -> [Rate, last used (s)]
        self._last_expiry_s = 0.0

    @property
    def enabled(self) -> bool:
        """Whether any entity sets this quota (else nothing is recorded)."""
        return bool(self._limits)

    def set_entity(self, entity: Entity, config: Mapping[str, float]) -> None:
        """The entity's config now (its rates parsed); without this key, it sets no quota."""
        if self.key in config:
            self._limits[entity] = config[self.key]
        else:
            self._limits.pop(entity, None)

    def replace_all(self, configs: Iterable[tuple[Entity, Mapping[str, float]]]) -> None:
        self._limits = {entity: config[self.key] for entity, config in configs if self.key in config}

    def quota_for(self, user: str, client_id: str) -> tuple[Entity, float] | None:
        """(the rate's key, the limit) that holds this user and client id, or None."""
        limits = self._limits
        for entity, rate_key in precedence(user, client_id):
            limit = limits.get(entity)
            if limit is not None:
                return rate_key, limit
        return None

    def record(self, user: str, client_id: str, value: float, now_s: float) -> int:
        """Add ``value`` bytes to the rate holding this user and client id; the throttle time
        (ms) it now owes, 0 within its quota or without one."""
        found = self.quota_for(user, client_id)
        if found is None:
            return 0
        rate_key, limit = found
        now_ms = now_s * 1000
        entry = self._rates.get(rate_key)
        if entry is None:
            self._expire(now_s)
            entry = self._rates[rate_key] = [Rate(self._samples, self._window_ms, now_ms), now_s]
        rate = entry[0]
        entry[1] = now_s
        rate.record(value, now_ms)
        return throttle_time_ms(rate.measure(now_ms), limit, rate.window_size_ms(now_ms), self._cap_ms)

    def unrecord(self, user: str, client_id: str, value: float, now_s: float) -> None:
        """Take back bytes recorded but not sent (a throttled fetch's answer, as Kafka does)."""
        found = self.quota_for(user, client_id)
        entry = found and self._rates.get(found[0])
        if entry:
            entry[0].record(-value, now_s * 1000)

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """The most one request may carry without being throttled whatever came before it
        (Kafka's getMaxValueInQuotaWindow: a fetch's max_bytes is cut to it); None: no quota."""
        found = self.quota_for(user, client_id)
        return None if found is None else found[1] * (self._samples - 1) * self._window_ms / 1000

    def _expire(self, now_s: float) -> None:
        if now_s - self._last_expiry_s < 60:
            return
        self._last_expiry_s = now_s
        for key in [key for key, (_rate, used) in self._rates.items() if now_s - used > IDLE_EXPIRY_S]:
            del self._rates[key]


def user_of(principal: str) -> str:
    """The user a quota knows from a principal: ``User:alice`` -> ``alice``."""
    return principal[5:] if principal.startswith("User:") else principal
