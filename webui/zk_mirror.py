"""ZkMirror: an in-memory copy of chosen ZooKeeper subtrees, kept current by watches.

How this works
--------------
A template names what to copy: for each root path, a tree of child names (``"*"`` for any
child) ending in ``LEAF``. A node with a template below it is listed with a child watch; a
``LEAF`` node is read with a data watch (its value and its creation and modification times).
A node that holds a value and children both (replication's ``/replication/topics/<t>``: the
assignment, with the partitions' states below) names itself ``"."`` (``SELF``) in its
template: it is listed and read, with both watches. ZooKeeper allows no node named ``.``.
Children that the template does not name are ignored, so ``/consumers/<g>/ids`` is copied
without whatever else a tool may have written under the group.

ZooKeeper watches fire once. When one fires, that node alone is read again, with a new watch;
a child that appears is read (and watched) with its whole subtree, a child that goes is dropped
with its subtree. A page view therefore reads memory only, and ZooKeeper sees one read per
change, not one per page.

Each watch is set once: kazoo keeps a set of watchers per path, and the bridge wraps each in a
new callable, so reading a node again while its watch is still set would add a second watcher
(and a second read per change, growing at every resync). ``_armed_*`` record the watches set.

kazoo fires every watch with a NONE event and forgets them all when the connection drops
(SUSPENDED or LOST). The mirror then forgets its armed watches too and, when CONNECTED comes
back (same session or a new one), reads everything again: whatever changed meanwhile was not
announced. A missing root is watched with ``exists`` until it is created.

Everything here runs on the reactor thread (the bridge delivers results and events there).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

from twisted.internet.defer import Deferred, succeed

from twisted_broker.registry.zookeeper import CONNECTED, LOST, SUSPENDED, NoNodeError, ZooKeeper

log = logging.getLogger(__name__)

LEAF = None  # a template entry whose node's data is copied
Template = Mapping[str, "Template | None"]
ANY = "*"
SELF = "."  # in a node's template: copy the node's own value too
# kazoo's EventType.NONE is the string "NONE": the event of a dropped connection. Compared by
# value so that kazoo stays inside registry/ (STYLE: only the bridge imports kazoo).
_CONNECTION_EVENT = "NONE"


@dataclass(frozen=True, slots=True)
class NodeData:
    value: bytes
    ctime_ms: int  # when the node was created (ZooKeeper's clock)
    mtime_ms: int  # when its value was last set


class ZkMirror:
    """The subtrees of ``roots`` (path -> template), copied from ``zk`` and kept current.

    ``children[path]`` (sorted names) exists for each copied node with a template below it
    that exists in ZooKeeper; ``data[path]`` for each copied leaf. ``version`` grows at every
    change, so callers can cache what they derive from the copy.
    """

    def __init__(self, zk: ZooKeeper, roots: Mapping[str, Template]) -> None:
        self._zk = zk
        self._roots = dict(roots)
        self.children: dict[str, tuple[str, ...]] = {}
        self.data: dict[str, NodeData] = {}
        self._wanted: dict[str, Template | None] = dict(self._roots)  # copied path -> template
        self._armed_children: set[str] = set()
        self._armed_data: set[str] = set()
        self._armed_exists: set[str] = set()
        self._pending = 0
        self._started = False
        self._disconnected = False
        self._sync_waiters: list[Deferred[None]] = []
        self._listeners: list[Callable[[], object]] = []
        self.synced = False
        self.version = 0
        self.reads = 0
        self.watch_events = 0
        self.resyncs = 0
        zk.add_state_listener(self._on_state)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Copy the roots now if connected, else as soon as the connection comes."""
        self._started = True
        if self._zk.connected:
            self._resync()
        else:
            self._disconnected = True

    def stop(self) -> None:
        """Stop reading (watches already set fire once more and are ignored)."""
        self._started = False

    def when_synced(self) -> Deferred[None]:
        """Fires once the first complete copy is in memory."""
        if self.synced:
            return succeed(None)
        d: Deferred[None] = Deferred()
        self._sync_waiters.append(d)
        return d

    def add_listener(self, listener: Callable[[], object]) -> None:
        """Call ``listener()`` after each change of the copy."""
        self._listeners.append(listener)

    def _on_state(self, state) -> None:
        if state in (SUSPENDED, LOST):
            # kazoo has just dropped every watcher (with a NONE event each).
            self._disconnected = True
            self._armed_children.clear()
            self._armed_data.clear()
            self._armed_exists.clear()
        elif state == CONNECTED and self._disconnected and self._started:
            self._disconnected = False
            self._resync()

    def _resync(self) -> None:
        self.resyncs += 1
        self._disconnected = False
        for root in self._roots:
            self._read_children(root, deep=True)

    # -- reads -----------------------------------------------------------------------------

    def _read_children(self, path: str, *, deep: bool) -> None:
        if not self._started or path not in self._wanted:
            return
        watch = None
        if path not in self._armed_children:
            self._armed_children.add(path)
            watch = partial(self._on_children_event, path)
        d = self._zk.get_children(path, watch=watch)
        self._issued(d)
        d.addCallbacks(self._got_children, self._children_failed,
                       callbackArgs=(path, deep), errbackArgs=(path,))
        d.addBoth(self._finished)

    def _read_data(self, path: str) -> None:
        if not self._started or path not in self._wanted:
            return
        watch = None
        if path not in self._armed_data:
            self._armed_data.add(path)
            watch = partial(self._on_data_event, path)
        d = self._zk.get(path, watch=watch)
        self._issued(d)
        d.addCallbacks(self._got_data, self._data_failed, callbackArgs=(path,), errbackArgs=(path,))
        d.addBoth(self._finished)

    def _watch_creation(self, path: str) -> None:
        if path in self._armed_exists:
            return
        self._armed_exists.add(path)
        d = self._zk.exists(path, watch=partial(self._on_exists_event, path))
        self._issued(d)

        def created_meanwhile(stat) -> None:
            if stat is not None:
                self._read_children(path, deep=True)

        d.addCallbacks(created_meanwhile, lambda failure: self._armed_exists.discard(path) or None)
        d.addBoth(self._finished)

    def _issued(self, d: Deferred) -> None:
        self._pending += 1
        self.reads += 1

    def _finished(self, result: object) -> None:
        self._pending -= 1
        if self._pending == 0 and not self.synced and not self._disconnected:
            self.synced = True
            waiters, self._sync_waiters = self._sync_waiters, []
            for waiter in waiters:
                waiter.callback(None)

    def _got_children(self, names: list[str], path: str, deep: bool) -> None:
        template = self._wanted.get(path)
        if template is None:
            return  # dropped while the read was under way
        new = tuple(sorted(names))
        old = self.children.get(path, ())
        if new != old or path not in self.children:
            self.children[path] = new
            self._changed()
        for name in set(old) - set(new):
            self._forget(f"{path}/{name}")
        known = set(old)
        for name in new:
            child_template = template.get(name, template.get(ANY, _UNWANTED))
            if child_template is _UNWANTED:
                continue
            child = f"{path}/{name}"
            if name in known and not deep and child in self._wanted and self._watched(child, child_template):
                continue  # its own watches cover it
            # (a known child whose watch is not set was deleted and created again between its
            # event and this listing: its read after the event found nothing and set none)
            self._wanted[child] = child_template
            if child_template is LEAF:
                self._read_data(child)
            else:
                if SELF in child_template:
                    self._read_data(child)
                self._read_children(child, deep=deep)

    def _watched(self, path: str, template) -> bool:
        """Whether ``path``'s own watches are set (its data's, its children's, as its template wants)."""
        if template is LEAF:
            return path in self._armed_data
        return path in self._armed_children and (SELF not in template or path in self._armed_data)

    def _children_failed(self, failure, path: str) -> None:
        self._armed_children.discard(path)  # kazoo sets no watch on a failed read
        if failure.check(NoNodeError):
            if path in self._roots:
                self._drop_subtree(path)
                self._watch_creation(path)
            # A vanished child: its parent's watch fires and drops it.
            return
        log.debug("listing %s failed: %s (read again on reconnection)", path, failure.value)

    def _got_data(self, result: tuple[bytes, object], path: str) -> None:
        if path not in self._wanted:
            return
        value, stat = result
        node = NodeData(value, int(stat.ctime), int(stat.mtime))
        if self.data.get(path) != node:
            self.data[path] = node
            self._changed()

    def _data_failed(self, failure, path: str) -> None:
        self._armed_data.discard(path)
        if failure.check(NoNodeError):
            if self.data.pop(path, None) is not None:
                self._changed()
            return
        log.debug("reading %s failed: %s (read again on reconnection)", path, failure.value)

    # -- watch events ----------------------------------------------------------------------

    def _on_children_event(self, path: str, event) -> None:
        if getattr(event, "type", None) == _CONNECTION_EVENT:
            return  # the state listener handles a dropped connection
        self.watch_events += 1
        self._armed_children.discard(path)
        self._read_children(path, deep=False)

    def _on_data_event(self, path: str, event) -> None:
        if getattr(event, "type", None) == _CONNECTION_EVENT:
            return
        self.watch_events += 1
        self._armed_data.discard(path)
        self._read_data(path)

    def _on_exists_event(self, path: str, event) -> None:
        if getattr(event, "type", None) == _CONNECTION_EVENT:
            return
        self.watch_events += 1
        self._armed_exists.discard(path)
        self._read_children(path, deep=True)

    # -- bookkeeping -------------------------------------------------------------------------

    def _forget(self, path: str) -> None:
        """Stop copying ``path`` and everything below it."""
        self._drop_subtree(path)
        self._wanted.pop(path, None)

    def _drop_subtree(self, path: str) -> None:
        for name in self.children.pop(path, ()):
            self._forget(f"{path}/{name}")
        self.data.pop(path, None)
        self._changed()

    def _changed(self) -> None:
        self.version += 1
        for listener in self._listeners:
            listener()


_UNWANTED = object()
