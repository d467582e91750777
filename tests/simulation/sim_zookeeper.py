"""An in-memory ZooKeeper behind the interface of twisted_broker/registry/zookeeper.py.

One ``ZooKeeperServer`` holds the tree (versions, zxids, ephemeral owners, watches) and the
sessions; each simulated broker has a ``SimZooKeeper`` client with one session at a time.
Requests reach the server and answers come back after seeded delays, and both keep each
session's order (ZooKeeper's FIFO client order: a session's operations are applied, and their
results and watch events delivered, in the order they were issued). Answers and events are
delivered on the broker's own clock (sim_broker.BrokerClock), so a crashed broker hears nothing.

Faults: ``cut(client)`` partitions a client from the server. The client notices after a
delay (SUSPENDED; operations in flight fail with ConnectionLoss, as kazoo's do) and the server
expires the session once it has heard nothing for the session timeout: its ephemeral nodes go
(firing others' watches) and its watches are dropped. Answers and events due while it is cut
are held, in order, until ``heal``, which reconnects: CONNECTED on the same session if it
lived, else LOST then CONNECTED on a new session, as kazoo reports it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from kazoo.exceptions import BadVersionError, ConnectionLoss, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.protocol.states import EventType, KeeperState, WatchedEvent, ZnodeStat
from twisted.internet.defer import Deferred

from twisted_broker.registry.zookeeper import CONNECTED, LOST, SUSPENDED

__all__ = ["ZooKeeperServer", "SimZooKeeper"]


@dataclass
class Node:
    data: bytes
    czxid: int
    mzxid: int
    ctime: int
    mtime: int
    owner: int = 0  # the ephemeral owner's session id, 0 for a persistent node
    version: int = 0
    cversion: int = 0
    pzxid: int = 0
    children: set = field(default_factory=set)


@dataclass
class Session:
    session_id: int
    client: "SimZooKeeper"
    alive: bool = True
    # id -> watch callbacks (kazoo keeps one per function and path: a dict keyed by the function)
    data_watches: dict = field(default_factory=dict)
    child_watches: dict = field(default_factory=dict)


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


class ZooKeeperServer:
    def __init__(self, clock, rng, trace, *, max_delay_s: float = 0.01) -> None:
        self.clock, self.rng, self.trace = clock, rng, trace
        self.max_delay_s = max_delay_s
        self.nodes: dict[str, Node] = {"/": Node(b"", 0, 0, 0, 0)}
        self.zxid = 0
        self.sessions: dict[int, Session] = {}
        self._next_session = 0x1000
        # Called as write_hook(session_id, path, old_value or None, new_value) for every write
        # (the invariants check the partition states' writers here).
        self.write_hook = lambda session_id, path, old, new: None

    def delay(self) -> float:
        return self.rng.uniform(0, self.max_delay_s)

    def now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    # -- sessions ----------------------------------------------------------------------------

    def open_session(self, client: "SimZooKeeper") -> Session:
        self._next_session += 1
        session = self.sessions[self._next_session] = Session(self._next_session, client)
        return session

    def expire(self, session: Session) -> None:
        if not session.alive:
            return
        session.alive = False
        session.data_watches.clear()
        session.child_watches.clear()
        self.trace(f"zk: session {session.session_id:x} of {session.client.name} expired")
        for path in sorted((p for p, n in self.nodes.items() if n.owner == session.session_id), reverse=True):
            self._delete(path, session.session_id)

    # -- operations (applied at once, in the order the clients' queues deliver them) ---------

    def apply(self, session: Session, op: str, args: tuple, watch):
        handler = {"create": self._op_create, "set": self._op_set, "get": self._op_get,
                   "get_children": self._op_get_children, "exists": self._op_exists,
                   "delete": self._op_delete, "transaction": self._op_transaction}[op]
        return handler(session, *args, watch=watch) if op in ("get", "get_children", "exists") \
            else handler(session, *args)

    def _stat(self, node: Node) -> ZnodeStat:
        return ZnodeStat(node.czxid, node.mzxid, node.ctime, node.mtime, node.version, node.cversion, 0,
                         node.owner, len(node.data), len(node.children), node.pzxid)

    def _op_create(self, session, path, value, ephemeral):
        if path in self.nodes:
            raise NodeExistsError()
        parent = _parent(path)
        if parent not in self.nodes:  # makepath=True: missing parents, persistent and empty
            self._op_create(session, parent, b"", False)
        self.zxid += 1
        now = self.now_ms()
        self.nodes[path] = Node(value, self.zxid, self.zxid, now, now, session.session_id if ephemeral else 0,
                                pzxid=self.zxid)
        up = self.nodes[parent]
        up.children.add(path.rsplit("/", 1)[1])
        up.cversion += 1
        up.pzxid = self.zxid
        self.write_hook(session.session_id, path, None, value)
        self._fire(path, EventType.CREATED, data=True)
        self._fire(parent, EventType.CHILD, data=False)
        return path

    def _op_set(self, session, path, value, version):
        node = self.nodes.get(path)
        if node is None:
            raise NoNodeError()
        if version != -1 and version != node.version:
            raise BadVersionError()
        self.write_hook(session.session_id, path, node.data, value)
        self.zxid += 1
        node.data, node.version, node.mzxid, node.mtime = value, node.version + 1, self.zxid, self.now_ms()
        self._fire(path, EventType.CHANGED, data=True)
        return self._stat(node)

    def _op_get(self, session, path, watch=None):
        node = self.nodes.get(path)
        if node is None:
            raise NoNodeError()
        if watch is not None:
            session.data_watches.setdefault(path, {})[watch] = None
        return node.data, self._stat(node)

    def _op_get_children(self, session, path, watch=None):
        node = self.nodes.get(path)
        if node is None:
            raise NoNodeError()
        if watch is not None:
            session.child_watches.setdefault(path, {})[watch] = None
        return sorted(node.children)

    def _op_exists(self, session, path, watch=None):
        if watch is not None:  # set whether the node exists or not
            session.data_watches.setdefault(path, {})[watch] = None
        node = self.nodes.get(path)
        return None if node is None else self._stat(node)

    def _op_delete(self, session, path, version=-1):
        node = self.nodes.get(path)
        if node is None:
            raise NoNodeError()
        if version != -1 and version != node.version:
            raise BadVersionError()
        if node.children:
            raise NotEmptyError()
        self._delete(path, session.session_id)
        return True

    def _delete(self, path: str, session_id: int) -> None:
        self.write_hook(session_id, path, self.nodes[path].data, None)
        del self.nodes[path]
        self.zxid += 1
        parent = self.nodes[_parent(path)]
        parent.children.discard(path.rsplit("/", 1)[1])
        parent.cversion += 1
        parent.pzxid = self.zxid
        self._fire(path, EventType.DELETED, data=True)
        self._fire(path, EventType.DELETED, data=False)
        self._fire(_parent(path), EventType.CHILD, data=False)

    def _op_transaction(self, session, ops):
        """All or nothing: applied to a copy of the tree, kept only if every op worked. Watch
        events are held back until then."""
        saved_nodes, saved_zxid = copy.deepcopy(self.nodes), self.zxid
        fire, hook = self._fire, self.write_hook
        events, writes = [], []
        self._fire = lambda path, kind, data: events.append((path, kind, data))
        self.write_hook = lambda *a: writes.append(a)
        results = []
        try:
            for kind, path, *args in ops:
                if kind == "check":
                    node = self.nodes.get(path)
                    if node is None:
                        raise NoNodeError()
                    if args[0] != -1 and node.version != args[0]:
                        raise BadVersionError()
                    results.append(True)
                elif kind == "create":
                    results.append(self._op_create(session, path, args[0], args[1]))
                elif kind == "set":
                    results.append(self._op_set(session, path, args[0], args[1]))
                elif kind == "delete":
                    results.append(self._op_delete(session, path, args[0]))
                else:
                    raise ValueError(f"unknown transaction op {kind!r}")
        except Exception:
            self.nodes, self.zxid = saved_nodes, saved_zxid
            raise
        finally:
            self._fire, self.write_hook = fire, hook
        for write in writes:
            hook(*write)
        for path, kind, data in events:
            fire(path, kind, data=data)
        return results

    def _fire(self, path: str, kind, *, data: bool) -> None:
        for session in list(self.sessions.values()):
            if not session.alive:
                continue
            table = session.data_watches if data else session.child_watches
            callbacks = table.pop(path, None)
            if callbacks:
                event = WatchedEvent(kind, KeeperState.CONNECTED, path)
                for callback in callbacks:
                    session.client.deliver_event(callback, event)


class SimZooKeeper:
    """One broker's client: the registry.zookeeper.ZooKeeper interface, on the broker's clock."""

    def __init__(self, server: ZooKeeperServer, clock, name: str, *, session_timeout_ms: int = 6000) -> None:
        self.server, self.clock, self.name = server, clock, name
        self.session_timeout_s = session_timeout_ms / 1000
        self.session: Session | None = None
        self.state = LOST
        self.link_up = True  # False while partitioned from the server
        self._generation = 0  # bumped at each connection loss: answers of an older one are lost
        self._listeners: list = []
        self._last_apply = 0.0  # FIFO: apply and deliver times never go back for this client
        self._last_deliver = 0.0
        self._cut_at: float | None = None
        self._held: list = []  # deliveries while partitioned, in order: sent once the link is back
        self._in_flight: list[Deferred] = []  # operations not answered yet
        self.dead = False  # the broker crashed: its session lingers until it expires

    # -- lifecycle -----------------------------------------------------------------------

    def start(self, timeout_s: float = 0.0) -> Deferred:
        self.session = self.server.open_session(self)
        self._set_state(CONNECTED)
        d = Deferred()
        self._deliver(lambda: d.callback(None))
        return d

    def stop(self) -> Deferred:
        if self.session is not None:
            self.server.expire(self.session)
        self._set_state(LOST)
        d = Deferred()
        self._deliver(lambda: d.callback(None))
        return d

    def crash(self) -> None:
        """The process died: nothing more is sent or delivered; the server expires the
        session after the timeout (it hears no more heartbeats)."""
        self.dead = True
        session = self.session
        self.server.clock.callLater(self.session_timeout_s, lambda: self.server.expire(session))

    @property
    def connected(self) -> bool:
        return self.state == CONNECTED

    @property
    def session_id(self) -> int | None:
        """As the bridge's: the session that owns the ephemeral nodes this client creates."""
        return self.session.session_id if self.session is not None else None

    def add_state_listener(self, listener) -> None:
        self._listeners.append(listener)

    def _set_state(self, state) -> None:
        if state == self.state:
            return
        self.state = state
        self.server.trace(f"zk: {self.name} {state}")
        for listener in list(self._listeners):  # the client's own news: not held by a partition
            self._deliver(lambda listener=listener: listener(state), local=True)

    # -- faults --------------------------------------------------------------------------

    def cut(self) -> None:
        if not self.link_up or self.dead:
            return
        self.link_up = False
        self._cut_at = self.server.clock.seconds()
        cut_at = self._cut_at
        notice = self.server.rng.uniform(0.1, self.session_timeout_s * 2 / 3)
        self.server.clock.callLater(notice, self._notice_loss, cut_at)
        session = self.session
        self.server.clock.callLater(self.session_timeout_s, self._expire_if_still_cut, session, cut_at)

    def _notice_loss(self, cut_at) -> None:
        if not self.link_up and self._cut_at == cut_at and not self.dead:
            self._generation += 1
            self._set_state(SUSPENDED)
            self._fail_in_flight()

    def _fail_in_flight(self) -> None:
        """The connection is lost: every operation in flight fails with ConnectionLoss at once,
        as kazoo's do (applied perhaps; their answers, held or late, are dropped)."""
        in_flight, self._in_flight = self._in_flight, []
        for d in in_flight:
            self._deliver(lambda d=d: d.called or d.errback(ConnectionLoss()), local=True)

    def _expire_if_still_cut(self, session, cut_at) -> None:
        if not self.link_up and self._cut_at == cut_at:
            self.server.expire(session)

    def heal(self) -> None:
        if self.link_up or self.dead:
            return
        self.link_up = True
        self._cut_at = None
        # What the partition held comes now, in order (the server resends it; TCP retransmits
        # what was under way). It was held until a session timeout after the cut, however soon
        # the link came back: a reconnected leader then waited that long for its states and
        # stayed fenced, its ISR unwritten.
        held, self._held = self._held, []
        for call in held:
            self._deliver(call, after=self.server.delay())
        self.server.clock.callLater(self.server.rng.uniform(0.01, 0.5), self._reconnect)

    def _reconnect(self) -> None:
        if not self.link_up or self.dead:
            return
        if self.state == CONNECTED:  # the loss was never noticed
            if self.session.alive:
                return
            self._generation += 1
            self._set_state(SUSPENDED)
            self._fail_in_flight()
        self._generation += 1
        if not self.session.alive:
            self._set_state(LOST)
            self.session = self.server.open_session(self)
        self._set_state(CONNECTED)

    # -- operations ----------------------------------------------------------------------

    def create(self, path: str, value: bytes = b"", *, ephemeral: bool = False) -> Deferred:
        return self._call("create", (path, value, ephemeral))

    def set(self, path: str, value: bytes, version: int = -1) -> Deferred:
        return self._call("set", (path, value, version))

    def get(self, path: str, watch=None) -> Deferred:
        return self._call("get", (path,), watch)

    def get_children(self, path: str, watch=None) -> Deferred:
        return self._call("get_children", (path,), watch)

    def exists(self, path: str, watch=None) -> Deferred:
        return self._call("exists", (path,), watch)

    def delete(self, path: str) -> Deferred:
        return self._call("delete", (path,))

    def transaction(self, ops: list[tuple]) -> Deferred:
        return self._call("transaction", (list(ops),))

    def _call(self, op: str, args: tuple, watch=None) -> Deferred:
        d = Deferred()
        generation = self._generation
        if self.state != CONNECTED or self.dead:
            self._deliver(lambda: d.errback(ConnectionLoss()), local=not self.link_up)
            return d
        self._in_flight = [x for x in self._in_flight if not x.called]
        self._in_flight.append(d)
        server = self.server
        at = max(self._last_apply, server.clock.seconds() + server.delay())
        self._last_apply = at

        def apply() -> None:
            if not self.link_up or generation != self._generation or not self.session.alive or self.dead:
                outcome = (False, ConnectionLoss())  # never reached the server
            else:
                try:
                    outcome = (True, server.apply(self.session, op, args, watch))
                except Exception as exc:
                    outcome = (False, exc)

            def answer() -> None:
                if d.called:
                    return  # failed when the connection was lost
                if generation != self._generation:
                    d.errback(ConnectionLoss())  # applied perhaps, but the answer was lost
                elif outcome[0]:
                    d.callback(outcome[1])
                else:
                    d.errback(outcome[1])
            self._deliver(answer, after=server.delay())
        server.clock.callLater(at - server.clock.seconds(), apply)
        return d

    def deliver_event(self, callback, event) -> None:
        """A watch fired at the server: delivered in order with this session's answers (while
        partitioned, it is held until the link is back, as the server resends it then: ``heal``)."""
        self._deliver(lambda: callback(event), after=self.server.delay())

    def _deliver(self, call, *, after: float = 0.0, local: bool = False) -> None:
        if self.dead:
            return
        now = self.server.clock.seconds()
        if local:
            self.clock.callLater(after, call)
            return
        if not self.link_up and self._cut_at is not None:
            self._held.append(call)  # until the link is back (heal)
            return
        at = max(self._last_deliver, now + after)
        self._last_deliver = at
        self.clock.callLater(at - now, call)
