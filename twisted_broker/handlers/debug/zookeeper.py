"""The debug port's ``zk`` command: a ZooKeeper node's children (``zk ls``), or its data and
stat (``zk get``), through the broker's own ZooKeeper session (handlers/debug/commands.py
dispatches to it). Read-only; answers are bounded, and a ZooKeeper that does not answer within
the timeout gets an error line rather than a session that hangs.
"""

from __future__ import annotations

import datetime

from twisted.internet.defer import Deferred, TimeoutError as DeferredTimeoutError, maybeDeferred
from twisted.python.failure import Failure

from twisted_broker.registry.zookeeper import NoNodeError
from twisted_broker.handlers.debug.text import DebugCommandError, escape_bytes, format_pairs, quoted_input

ZK_USAGE = "zk ls PATH | zk get PATH"
ZK_SUBCOMMANDS = ("ls", "get")
ZK_DATA_PREVIEW_BYTES = 4096
MAX_ZK_CHILDREN = 1000


class ZooKeeperCommands:
    """``zk ls PATH`` and ``zk get PATH`` (reactor thread).

    ``zk`` is the ZooKeeper bridge (None with enable.zookeeper=false: every command is then an
    error); ``clock`` provides callLater for the timeout.
    """

    def __init__(self, zk, *, clock, timeout_s: float) -> None:
        self._zk, self._clock, self._timeout_s = zk, clock, timeout_s
        self._handlers = {"ls": self._ls, "get": self._get}

    def zk(self, args: list[str]) -> Deferred:
        if self._zk is None:
            raise DebugCommandError("ZooKeeper is not enabled")
        handler = self._handlers.get(args[0].lower())
        if handler is None:
            raise DebugCommandError(f"usage: {ZK_USAGE}")
        path = _zk_path(args[1])
        result = maybeDeferred(handler, path)
        result.addTimeout(self._timeout_s, self._clock)
        result.addErrback(self._failed, path)
        return result

    def _ls(self, path: str) -> Deferred:
        children = self._zk.get_children(path)
        children.addCallback(self._children_answer, path)
        return children

    def _children_answer(self, names: list[str], path: str) -> list[str]:
        if not names:
            return [f"(no children of {path})"]
        shown = sorted(names)[:MAX_ZK_CHILDREN]
        return shown + ([f"(and {len(names) - len(shown)} more)"] if len(names) > len(shown) else [])

    def _get(self, path: str) -> Deferred:
        def show(result) -> list[str]:
            value, stat = result
            return format_pairs([
                ("data", escape_bytes(value or b"", ZK_DATA_PREVIEW_BYTES)),
                ("data length", stat.dataLength), ("version", stat.version),
                ("children", stat.numChildren), ("created", _utc(stat.ctime)), ("modified", _utc(stat.mtime)),
                ("ephemeral owner", f"{stat.ephemeralOwner:#x}" if stat.ephemeralOwner else "none (persistent)")])
        value = self._zk.get(path)
        value.addCallback(show)
        return value

    def _failed(self, failure: Failure, path: str):
        if failure.check(NoNodeError):
            raise DebugCommandError(f"no ZooKeeper node {path}")
        if failure.check(DeferredTimeoutError):
            raise DebugCommandError(f"ZooKeeper did not answer within {self._timeout_s:g} s")
        raise DebugCommandError(f"ZooKeeper: {type(failure.value).__name__} {failure.getErrorMessage()}".rstrip())


def _zk_path(text: str) -> str:
    # Checked here so that a typo gets a plain answer, not whatever kazoo makes of it.
    if not text.startswith("/") or (text != "/" and (text.endswith("/") or "//" in text)):
        raise DebugCommandError(f"PATH must be an absolute ZooKeeper path like /brokers/ids, not {quoted_input(text)}")
    if any(part in (".", "..") for part in text.split("/")) or any(ord(c) < 0x20 for c in text):
        raise DebugCommandError(f"PATH {quoted_input(text)} has a relative part or a control character")
    return text


def _utc(epoch_ms: int) -> str:
    return datetime.datetime.fromtimestamp(epoch_ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
