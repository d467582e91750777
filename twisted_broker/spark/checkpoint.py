"""The ETL's state on disk: checkpoint, run manifests, publishing, atomic writes. No Spark.

Layout (``OUTPUT`` and ``CHECKPOINT`` are the command's ``--output`` and ``--checkpoint``):

=======================================  ==================================================
``OUTPUT/_tmp/<run>/``                   a run being written: Spark's files, then
                                         ``_manifest.json``. Never read by anyone; removed
                                         by the next run if the run died before publishing
``OUTPUT/load_date=<D>/run_id=<run>/``   a published run: renamed from ``_tmp/<run>`` in one
                                         ``rename(2)``, so it appears whole or not at all
                                         (Spark's partition discovery turns both directory
                                         levels into columns and skips ``_tmp``)
``CHECKPOINT/offsets.json``              the committed offsets, per ``<broker>-<partition>``
                                         (per ``<partition>`` for a replicated topic: the
                                         offset holds on every replica), and the run that
                                         committed them
``CHECKPOINT/manifests/<run>.json``      a copy of each committed run's manifest
``CHECKPOINT/lock``                      held (flock) by the running ETL
=======================================  ==================================================

A manifest names its run, the run it continues (``previous_run_id``: the checkpoint's run
when it was planned) and, per partition, ``from``/``until`` offsets, bytes, messages, CRC
failures and any gap. Every file is written to a temporary name, fsynced and renamed, and
the directory fsynced, so a crash leaves the old version or the new one, never half a file.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMAT = 1
TEMP_DIR = "_tmp"
MANIFEST_NAME = "_manifest.json"
OFFSETS_NAME = "offsets.json"
LOCK_NAME = "lock"


class CheckpointError(ValueError):
    """The checkpoint or the output does not fit this run (another topic, a broken chain)."""


class Locked(CheckpointError):
    """Another ETL holds the checkpoint's lock."""


@dataclass(frozen=True)
class Checkpoint:
    """Committed offsets: everything before them is in published output, nothing after."""

    topic: str
    run_id: str | None = None  # the run that committed them; None before the first
    offsets: Mapping[str, int] = field(default_factory=dict)  # "<broker>-<partition>" or "<partition>" -> offset
    committed_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "topic": self.topic, "run_id": self.run_id,
                "offsets": dict(sorted(self.offsets.items())), "committed_at": self.committed_at}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> "Checkpoint":
        if value.get("format") != FORMAT:
            raise CheckpointError(f"checkpoint format {value.get('format')!r} is not {FORMAT}")
        return cls(value["topic"], value.get("run_id"), {str(k): int(v) for k, v in value["offsets"].items()},
                   value.get("committed_at"))

    def advanced_by(self, manifest: Mapping[str, Any], committed_at: str) -> "Checkpoint":
        """The checkpoint after ``manifest``'s run: its ``until`` offsets over these."""
        offsets = dict(self.offsets)
        for name, entry in manifest["partitions"].items():
            offsets[name] = int(entry["until"])
        return Checkpoint(self.topic, manifest["run_id"], offsets, committed_at)


# -- atomic files ----------------------------------------------------------------------------

def fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomically(path: Path, value: Any) -> None:
    """Write ``value`` as JSON to ``path`` by write, fsync, rename, fsync of the directory."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "w", encoding="utf-8") as out:
        json.dump(value, out, indent=2, sort_keys=False)
        out.write("\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    fsync_directory(path.parent)


def fsync_tree(root: Path) -> None:
    """fsync every file and directory under ``root`` (Spark's local writer does not)."""
    for directory, _subdirectories, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_directory(Path(directory))


# -- the checkpoint directory ----------------------------------------------------------------

class CheckpointStore:
    """``CHECKPOINT/``: offsets.json, manifests/, and the lock."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._lock_fd: int | None = None

    @property
    def offsets_path(self) -> Path:
        return self.directory / OFFSETS_NAME

    def lock(self) -> None:
        """Take the lock, or raise Locked. A killed process's lock goes with it."""
        (self.directory / "manifests").mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise Locked(f"another etl run holds {self.directory / LOCK_NAME}") from None
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    def load(self, topic: str) -> Checkpoint:
        """The committed checkpoint, or an empty one for ``topic`` if none was written yet."""
        try:
            value = json.loads(self.offsets_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return Checkpoint(topic)
        checkpoint = Checkpoint.from_json(value)
        if checkpoint.topic != topic:
            raise CheckpointError(f"{self.offsets_path} holds offsets of topic {checkpoint.topic}, not {topic}")
        return checkpoint

    def commit(self, checkpoint: Checkpoint, manifest: Mapping[str, Any]) -> None:
        """Keep a copy of the run's manifest, then replace offsets.json (the commit point)."""
        write_json_atomically(self.directory / "manifests" / f"{manifest['run_id']}.json", manifest)
        write_json_atomically(self.offsets_path, checkpoint.to_json())


# -- the output directory --------------------------------------------------------------------

def temp_path(output: Path, run_id: str) -> Path:
    return Path(output) / TEMP_DIR / run_id


def published_path(output: Path, load_date: str, run_id: str) -> Path:
    return Path(output) / f"load_date={load_date}" / f"run_id={run_id}"


def published_manifests(output: Path, topic: str) -> Iterator[tuple[Path, dict[str, Any]]]:
    """(directory, manifest) of every published run of ``topic`` under ``output``."""
    for path in sorted(Path(output).glob(f"load_date=*/run_id=*/{MANIFEST_NAME}")):
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if manifest.get("topic") == topic:
            yield path.parent, manifest


def remove_unpublished(output: Path) -> list[str]:
    """Delete ``OUTPUT/_tmp/*`` (runs that died before publishing); return their run ids.
    Call only while holding the checkpoint's lock."""
    removed = []
    temp_root = Path(output) / TEMP_DIR
    if temp_root.is_dir():
        for entry in sorted(temp_root.iterdir()):
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            removed.append(entry.name)
    return removed


def publish(temp: Path, final: Path) -> None:
    """Move a finished run into place in one rename; fsync so the move outlives a crash.

    Raises FileExistsError if ``final`` exists (run ids are unique: it never should).
    """
    fsync_tree(temp)
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        raise FileExistsError(f"{final} already exists")
    os.rename(temp, final)
    fsync_directory(final.parent)
    fsync_directory(temp.parent)
