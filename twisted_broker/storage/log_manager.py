"""All the partition logs of one broker, under ``log.dir``.

Directories are ``<topic>-<partition>`` (split at the last ``-``). At start the manager opens
every partition directory; if ``.kafka_cleanshutdown`` is missing, the newest segment of each
is recovered. ``close()`` flushes and closes every log, then writes the marker so the next
start skips recovery. Logs are created on the first produce to a valid partition; topic names
that could escape ``log.dir`` are refused.

A replica's log (docs/replication.md) is created by replication, for a partition its
assignment gives this broker, and is opened with the high watermark of its checkpoint: it
never serves, even right after a restart, what was not committed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator

from twisted_broker.errors import InvalidTopic, PartitionNotReady, WrongPartition
from twisted_broker.storage.checkpoints import (
    HIGH_WATERMARK_CHECKPOINT, is_replica_log, read_high_watermarks, write_leader_epochs,
)
from twisted_broker.storage.flusher import Flusher, InlineFlusher
from twisted_broker.storage.log import Log, LogPolicy
from twisted_broker.storage.log_directory import open_log_directory
from twisted_broker.storage.recovery import recover_segment
from twisted_broker.storage.replica_log import ReplicaLog
from twisted_broker.storage.topic_name import MAX_TOPIC_NAME_LENGTH, check_topic_name

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
EMPTY_EPOCHS = b"0\n0\n"  # an epoch file with no entry: the mark of a new replica's log


def parse_partition_directory(name: str) -> tuple[str, int] | None:
    """``("my-topic", 12)`` for ``"my-topic-12"``; None if the name is not of that form."""
    topic, dash, number = name.rpartition("-")
    if not dash or not topic or not (number.isascii() and number.isdigit()):
        return None
    return topic, int(number)


class LogManager:
    """Owns the logs of a broker. Used from one thread (the reactor's)."""

    def __init__(self, log_dir: str, *, now: Callable[[], float],
                 partitions_for: Callable[[str], int] = lambda topic: 1,
                 policy_for: Callable[[str], LogPolicy] = lambda topic: LogPolicy(),
                 max_topic_name_length: int = MAX_TOPIC_NAME_LENGTH,
                 on_new_topic: Callable[[str], object] | None = None,
                 on_topic_gone: Callable[[str], object] | None = None,
                 flusher: Flusher | None = None, visible_at_append: bool = False) -> None:
        self.log_dir = os.path.abspath(log_dir)
        self._now = now
        self.partitions_for = partitions_for
        self.policy_for = policy_for
        self.max_topic_name_length = max_topic_name_length
        self.on_new_topic = on_new_topic
        self.on_topic_gone = on_topic_gone  # the last log of a topic was deleted here
        self.flusher = flusher or InlineFlusher()
        self.visible_at_append = visible_at_append  # 0.7 topics' logs: log.visibility=committed
        self._logs: dict[str, dict[int, Log]] = {}
        # Names of topics held here already checked, with the length limit they were checked
        # against: a request's name is checked once, not per request (one per log: bounded).
        self._checked_names: dict[str, int] = {}
        self.recovered_bytes = 0
        self.opened = False

    def open(self) -> None:
        """Open every partition directory, recovering after an unclean shutdown.

        Raises ValueError (non-contiguous segments) or OSError: the broker must not start.
        """
        os.makedirs(self.log_dir, exist_ok=True)
        marker = os.path.join(self.log_dir, CLEAN_SHUTDOWN_MARKER)
        clean = os.path.exists(marker)
        if clean:
            os.unlink(marker)  # from now on a crash must lead to recovery
        try:
            high_watermarks = read_high_watermarks(self.log_dir)
        except ValueError as exc:
            # Nothing is lost: each replica then shows nothing until its leader says what is committed.
            log.error("%s: %s; replica logs start with nothing visible", self.log_dir, exc)
            high_watermarks = {}
        for name in sorted(os.listdir(self.log_dir)):
            path = os.path.join(self.log_dir, name)
            if name == CLEAN_SHUTDOWN_MARKER:
                continue
            if not os.path.isdir(path):
                if not name.startswith(HIGH_WATERMARK_CHECKPOINT):
                    log.warning("ignoring %s in log.dir: not a partition directory", path)
                continue
            parsed = parse_partition_directory(name)
            if parsed is None:
                log.warning("ignoring directory %s: not named <topic>-<partition>", path)
                continue
            topic, partition = parsed
            try:
                check_topic_name(topic, self.max_topic_name_length)
            except InvalidTopic as exc:
                log.warning("ignoring directory %s: %s", path, exc)
                continue
            segments = open_log_directory(path, self._now())
            if not clean:
                self.recovered_bytes += recover_segment(segments[-1])
            if not is_replica_log(path) and (topic, partition) in high_watermarks:
                # A power loss took its mark, written without an fsync while the log was
                # empty (checkpoints.py); the checkpoint, written since, names it.
                write_leader_epochs(path, EMPTY_EPOCHS)
            if is_replica_log(path):
                opened = ReplicaLog(path, topic, partition, segments, policy=self.policy_for(topic), now=self._now,
                                    flusher=self.flusher, high_watermark=high_watermarks.get((topic, partition), 0))
            else:
                opened = self._new_0_7_log(path, topic, partition, segments)
            self._logs.setdefault(topic, {})[partition] = opened
        self.opened = True
        log.info("opened %d logs in %s (%s)", sum(map(len, self._logs.values())), self.log_dir,
                 "clean shutdown" if clean else f"recovered, {self.recovered_bytes} bytes truncated")

    # -- lookup --------------------------------------------------------------------------

    def topics(self) -> list[str]:
        return sorted(self._logs)

    def topics_0_7(self) -> list[str]:
        """The topics with logs of 0.7's kind here: what 0.7's registry lists for this broker."""
        return sorted(t for t, logs in self._logs.items() if not all(isinstance(l, ReplicaLog) for l in logs.values()))

    def has_topic(self, topic: str) -> bool:
        """True if this broker holds a log of ``topic``."""
        return topic in self._logs

    def logs(self) -> Iterator[Log]:
        for partitions in self._logs.values():
            yield from partitions.values()

    def check_partition(self, topic: str, partition: int) -> None:
        """Raise InvalidTopic or WrongPartition unless ``topic``/``partition`` may exist here."""
        if self._checked_names.get(topic) != self.max_topic_name_length:
            check_topic_name(topic, self.max_topic_name_length)
            if topic in self._logs:
                self._checked_names[topic] = self.max_topic_name_length
        count = self.partitions_for(topic)
        if not 0 <= partition < count:
            raise WrongPartition(f"partition {partition} of {topic!r} is not in [0, {count})")

    def get_log(self, topic: str, partition: int) -> Log | None:
        """The log, or None if it was never created. Raises like ``check_partition``."""
        self.check_partition(topic, partition)
        partitions = self._logs.get(topic)
        return partitions.get(partition) if partitions is not None else None

    def get_or_create_log(self, topic: str, partition: int) -> Log:
        """The log, created (directory and first segment) if needed. Raises like ``check_partition``."""
        existing = self.get_log(topic, partition)
        if isinstance(existing, ReplicaLog):
            # A replicated topic's replica, asked for as a 0.7 topic's: the broker has not read
            # (or has lost) the topic's replication state. Only replication appends to it.
            raise PartitionNotReady(f"{topic}-{partition} is a replica here; its replication state is not known yet")
        if existing is not None:
            return existing
        path = self._partition_path(topic, partition)
        os.makedirs(path, exist_ok=True)
        new_topic = topic not in self._logs
        created = self._new_0_7_log(path, topic, partition, open_log_directory(path, self._now()))
        self._logs.setdefault(topic, {})[partition] = created
        log.info("created log %s", path)
        if new_topic and self.on_new_topic is not None:
            self.on_new_topic(topic)
        return created

    def _new_0_7_log(self, path: str, topic: str, partition: int, segments) -> Log:
        created = Log(path, topic, partition, segments, policy=self.policy_for(topic), now=self._now,
                      flusher=self.flusher)
        created.visible_at_append = self.visible_at_append
        return created

    def create_replica_log(self, topic: str, partition: int) -> ReplicaLog:
        """The log of a replica this broker was assigned, created if needed, publishing a high
        watermark. Partition counts are replication's: only the name is checked here.
        Raises InvalidTopic for a bad name or a 0.7 topic's partition, or OSError."""
        check_topic_name(topic, self.max_topic_name_length)
        existing = self._logs.get(topic, {}).get(partition)
        if existing is not None and not isinstance(existing, ReplicaLog) and not existing.written_end:
            # Empty and unmarked: a replica's log taken up just before a power loss lost its
            # marker (below), or a 0.7 log never written to; either way nothing is in it.
            self._forget_0_7_log(topic, partition, existing)
            existing = None
        if existing is not None:
            if not isinstance(existing, ReplicaLog):
                raise InvalidTopic(f"{topic}-{partition} is the log of a 0.7 topic, not a replica's")
            return existing
        path = self._partition_path(topic, partition)
        os.makedirs(path, exist_ok=True)
        if not is_replica_log(path):
            # Not fsynced while the log is empty: ReplicaLog.append fsyncs it before the first
            # byte (checkpoints.py; issue 23).
            write_leader_epochs(path, EMPTY_EPOCHS, durable=False)
        created = ReplicaLog(path, topic, partition, open_log_directory(path, self._now()),
                             policy=self.policy_for(topic), now=self._now, flusher=self.flusher, high_watermark=0)
        self._logs.setdefault(topic, {})[partition] = created
        log.info("created replica log %s", path)
        return created  # not on_new_topic: replicated topics stay out of 0.7's registry

    def _forget_0_7_log(self, topic: str, partition: int, log_: Log) -> None:
        log_.close()
        del self._logs[topic][partition]
        if not self._logs[topic]:
            del self._logs[topic]
            if self.on_topic_gone is not None:
                self.on_topic_gone(topic)

    def delete_log(self, topic: str, partition: int) -> None:
        """Close and delete a log and its directory (a replica moved away by reassignment, a
        topic deleted)."""
        log_ = self._logs.get(topic, {}).pop(partition, None)
        if log_ is None:
            return
        gone = not self._logs[topic]
        if gone:
            del self._logs[topic]
        log_.close()
        for segment in log_.segments:
            segment.delete()
        for name in os.listdir(log_.directory):
            os.unlink(os.path.join(log_.directory, name))
        os.rmdir(log_.directory)
        log.info("deleted log %s", log_.directory)
        if gone and self.on_topic_gone is not None:
            self.on_topic_gone(topic)

    def _partition_path(self, topic: str, partition: int) -> str:
        path = os.path.join(self.log_dir, f"{topic}-{partition}")
        # check_topic_name already excludes "/", "." and "..": this guards against a future
        # change to it ever letting a name leave log.dir.
        if os.path.dirname(os.path.abspath(path)) != self.log_dir:
            raise InvalidTopic(f"topic name {topic!r} leaves the log directory")
        return path

    # -- maintenance (called by the broker's timers) -------------------------------------

    def flush_due(self) -> int:
        """Flush every log whose oldest unflushed data is older than its flush interval."""
        return sum(log_.flush_if_due() for log_ in self.logs() if log_.write_error is None)

    def flush_all(self) -> None:
        for log_ in self.logs():
            if log_.write_error is None:
                log_.flush()

    def cleanup(self) -> int:
        """Apply retention to every log; return the number of segments deleted."""
        now = self._now()
        deleted = 0
        for log_ in self.logs():
            for segment in log_.delete_old_segments(now):
                log.info("retention deleted %s", segment.path)
                deleted += 1
        return deleted

    def close(self) -> None:
        """Flush and close every log, then mark the shutdown clean (only if every flush worked)."""
        failures = 0
        for log_ in self.logs():
            try:
                log_.close()
            except OSError:
                log.exception("closing %s failed", log_.name)
                failures += 1
            failures += log_.write_error is not None
        self._logs.clear()
        if self.opened and not failures:
            with open(os.path.join(self.log_dir, CLEAN_SHUTDOWN_MARKER), "wb"):
                pass
        self.opened = False
