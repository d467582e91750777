"""The debug port's ``replicas [TOPIC]``: one line per replica this broker holds
(docs/replication.md), from server/stats.py ``replication_snapshot``.

Columns: topic, partition, role (``leader``, ``following``, ``truncating``, ``offline``; a
fenced leader shows ``leader(fenced)``), the leader's broker id, the leader epoch, the ISR,
the high watermark (what consumers may read), the log end, and the lag: on a follower, the
bytes it is behind its leader's log end (``-`` before the first answer); on a leader, each
follower's as ``BROKER:BYTES`` (``?`` for one that has not fetched from this leader yet).
"""

from __future__ import annotations

from collections.abc import Callable

from twisted_broker.handlers.debug.text import DebugCommandError, format_table

REPLICAS_HEADER = ["topic", "partition", "role", "leader", "epoch", "isr", "hw", "end", "lag"]


class ReplicaCommands:
    """``replicas`` over ``replication()`` (None: this broker runs without ZooKeeper)."""

    def __init__(self, replication: Callable[[], dict] | None) -> None:
        self._replication = replication

    def replicas(self, args: list[str]) -> list[str]:
        if self._replication is None:
            raise DebugCommandError("no replication: this broker runs without ZooKeeper")
        rows = [row for row in self._replication()["replicas"] if not args or row["topic"] == args[0]]
        if not rows:
            return [f"no replica of {args[0]!r} on this broker" if args else "no replica on this broker"]
        return format_table(REPLICAS_HEADER, [replica_cells(row) for row in rows])


def replica_cells(row: dict) -> list:
    role = row["role"] + ("(fenced)" if row["fenced"] else "")
    if row["role"] == "leader":
        lag = " ".join(f"{broker}:{'?' if bytes_ is None else bytes_}"
                       for broker, bytes_ in row["follower_lag_bytes"].items()) or "-"
    else:
        lag = "-" if row["lag_bytes"] is None else row["lag_bytes"]
    return [row["topic"], row["partition"], role, "-" if row["leader"] is None else row["leader"],
            row["leader_epoch"], ",".join(map(str, row["isr"])) or "-", row["high_watermark"], row["log_end"], lag]
