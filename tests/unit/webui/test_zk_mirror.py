"""ZkMirror against an in-memory ZooKeeper that fires watches as the real one does (once)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from twisted.internet.defer import fail, succeed

from twisted_broker.registry.zookeeper import CONNECTED, SUSPENDED, NoNodeError
from webui.cluster_cache import TEMPLATE, ClusterCache
from webui.zk_mirror import ANY, LEAF, ZkMirror


@dataclass
class Event:
    type: str
    path: str


@dataclass
class Stat:
    ctime: int
    mtime: int


class FakeZooKeeper:
    """The bridge's read interface over a dict; mutations fire the watches they trigger."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, int, int]] = {}
        self.child_watches: dict[str, list] = defaultdict(list)
        self.data_watches: dict[str, list] = defaultdict(list)
        self.connected = True
        self.listeners: list = []
        self.clock_ms = 1000
        self.reads: list[str] = []

    def add_state_listener(self, listener) -> None:
        self.listeners.append(listener)

    # -- reads (the bridge's signatures) --

    def get_children(self, path, watch=None):
        self.reads.append(path)
        if path not in self.nodes:
            return fail(NoNodeError())
        if watch is not None:
            self.child_watches[path].append(watch)
        prefix = path + "/"
        return succeed([p[len(prefix):] for p in self.nodes if p.startswith(prefix) and "/" not in p[len(prefix):]])

    def get(self, path, watch=None):
        self.reads.append(path)
        if path not in self.nodes:
            return fail(NoNodeError())
        if watch is not None:
            self.data_watches[path].append(watch)
        value, ctime, mtime = self.nodes[path]
        return succeed((value, Stat(ctime, mtime)))

    def exists(self, path, watch=None):
        if watch is not None:
            self.data_watches[path].append(watch)
        node = self.nodes.get(path)
        return succeed(None if node is None else Stat(node[1], node[2]))

    # -- changes --

    def create(self, path: str, value: bytes = b"") -> None:
        parent = path.rsplit("/", 1)[0]
        if parent and parent not in self.nodes:
            self.create(parent)
        self.clock_ms += 1
        self.nodes[path] = (value, self.clock_ms, self.clock_ms)
        self._fire(self.data_watches, path, "CREATED")
        if parent:
            self._fire(self.child_watches, parent, "CHILD")

    def set(self, path: str, value: bytes) -> None:
        self.clock_ms += 1
        self.nodes[path] = (value, self.nodes[path][1], self.clock_ms)
        self._fire(self.data_watches, path, "CHANGED")

    def delete(self, path: str) -> None:
        prefix = path + "/"
        for child in [p for p in self.nodes if p.startswith(prefix) and "/" not in p[len(prefix):]]:
            self.delete(child)
        del self.nodes[path]
        self._fire(self.data_watches, path, "DELETED")
        self._fire(self.child_watches, path, "DELETED")
        self._fire(self.child_watches, path.rsplit("/", 1)[0], "CHILD")

    def drop_connection(self) -> None:
        """What kazoo does when the connection drops: SUSPENDED, then every watch with NONE."""
        self.connected = False
        for listener in self.listeners:
            listener(SUSPENDED)
        watches = [w for ws in [*self.child_watches.values(), *self.data_watches.values()] for w in ws]
        self.child_watches.clear()
        self.data_watches.clear()
        for watch in watches:
            watch(Event("NONE", None))

    def reconnect(self) -> None:
        self.connected = True
        for listener in self.listeners:
            listener(CONNECTED)

    @staticmethod
    def _fire(watches, path, kind) -> None:
        for watch in watches.pop(path, []):
            watch(Event(kind, path))


def registry() -> FakeZooKeeper:
    zk = FakeZooKeeper()
    zk.create("/brokers/ids/0", b"h-1:127.0.0.1:9092")
    zk.create("/brokers/topics/t/0", b"2")
    zk.create("/consumers/g/ids/g_c", b'{ "t": 1 }')
    zk.create("/consumers/g/offsets/t/0-0", b"15")
    return zk


def test_first_copy_holds_the_registry_and_fires_when_synced():
    zk = registry()
    mirror = ZkMirror(zk, TEMPLATE)
    synced = mirror.when_synced()
    mirror.start()
    assert synced.called and mirror.synced
    assert mirror.children["/brokers/topics"] == ("t",)
    assert mirror.data["/brokers/topics/t/0"].value == b"2"
    assert mirror.data["/consumers/g/offsets/t/0-0"].value == b"15"


def test_changes_arrive_through_watches_without_rereading_the_rest():
    zk = registry()
    cache = ClusterCache(ZkMirror(zk, TEMPLATE), zk_connect="zk")
    cache.start()
    before = len(zk.reads)
    zk.create("/brokers/topics/new/0", b"4")
    zk.set("/consumers/g/offsets/t/0-0", b"30")
    zk.create("/consumers/g/owners/t/0-0", b"g_c-0")
    assert cache.topics() == ["new", "t"]
    assert cache.topic_brokers("new") == {0: 4}
    assert cache.group("g").offsets == {"t": {"0-0": 30}}
    assert cache.group("g").owners == {"t": {"0-0": "g_c-0"}}
    # Only the changed nodes and the listings above them were read again.
    assert set(zk.reads[before:]) == {
        "/brokers/topics", "/brokers/topics/new", "/brokers/topics/new/0", "/consumers/g/offsets/t/0-0",
        "/consumers/g", "/consumers/g/owners", "/consumers/g/owners/t", "/consumers/g/owners/t/0-0"}


def test_a_deleted_subtree_is_forgotten():
    zk = registry()
    cache = ClusterCache(ZkMirror(zk, TEMPLATE), zk_connect="zk")
    cache.start()
    zk.delete("/consumers/g")
    zk.delete("/brokers/ids/0")
    assert cache.groups() == []
    assert cache.group("g") is None
    assert cache.brokers() == {}
    assert not any(path.startswith("/consumers/g") for path in cache.mirror.data)


def test_each_node_has_at_most_one_watch_even_after_reconnections():
    zk = registry()
    mirror = ZkMirror(zk, TEMPLATE)
    mirror.start()
    for _ in range(3):
        zk.drop_connection()
        zk.reconnect()
        zk.set("/consumers/g/offsets/t/0-0", b"16")
    assert mirror.resyncs == 4
    assert all(len(watches) <= 1 for watches in zk.child_watches.values())
    assert all(len(watches) <= 1 for watches in zk.data_watches.values())
    assert mirror.data["/consumers/g/offsets/t/0-0"].value == b"16"


def test_what_changed_while_disconnected_is_read_on_reconnection():
    zk = registry()
    mirror = ZkMirror(zk, TEMPLATE)
    mirror.start()
    zk.drop_connection()
    # Changes the mirror cannot hear about: no watch is set while disconnected.
    zk.nodes["/consumers/g/offsets/t/0-0"] = (b"99", 1, 2)
    zk.nodes["/brokers/ids/1"] = (b"h-2:127.0.0.1:9093", 1, 1)
    zk.reconnect()
    assert mirror.data["/consumers/g/offsets/t/0-0"].value == b"99"
    assert mirror.children["/brokers/ids"] == ("0", "1")


def test_a_missing_root_is_watched_until_created():
    zk = FakeZooKeeper()
    zk.create("/brokers/ids/0", b"h-1:127.0.0.1:9092")
    mirror = ZkMirror(zk, TEMPLATE)
    mirror.start()
    assert mirror.synced
    assert "/consumers" not in mirror.children
    zk.create("/consumers/late/ids/late_c", b'{ "t": 1 }')
    assert mirror.children["/consumers"] == ("late",)
    assert mirror.data["/consumers/late/ids/late_c"].value == b'{ "t": 1 }'


def test_nodes_the_template_does_not_name_are_ignored():
    zk = registry()
    zk.create("/consumers/g/something/else", b"x")
    mirror = ZkMirror(zk, {"/consumers": {ANY: {"ids": {ANY: LEAF}}}})
    mirror.start()
    assert not any("something" in path for path in [*mirror.children, *mirror.data])
    assert "/consumers/g/offsets" not in mirror.children


def test_starting_while_disconnected_copies_once_connected():
    zk = registry()
    zk.connected = False
    mirror = ZkMirror(zk, TEMPLATE)
    mirror.start()
    assert not mirror.synced and not mirror.data
    zk.reconnect()
    assert mirror.synced and mirror.data


def test_unparsable_values_are_shown_as_such():
    zk = registry()
    zk.create("/consumers/bad/ids/bad_c", b"not json")
    zk.create("/consumers/bad/offsets/t/0-0", b"12x")
    zk.create("/brokers/ids/7", b"garbage")
    cache = ClusterCache(ZkMirror(zk, TEMPLATE), zk_connect="zk")
    cache.start()
    state = cache.group("bad")
    assert state.consumers["bad_c"].subscription is None and state.consumers["bad_c"].error
    assert state.offsets == {"t": {"0-0": None}}
    assert list(cache.brokers()) == [0]


def test_a_leaf_deleted_and_created_again_between_its_event_and_its_parents_listing_is_read():
    # The controller's session ends; ZooKeeper fires the node's data watch, then its parent's
    # child watch, and the next controller's node lands between the mirror's two reads: the
    # read after the data event finds nothing (and sets no watch), the listing still names
    # the node. It must be read again, or the console shows no controller until the next
    # change (CI: "timed out after 20.0 s waiting for a live controller").
    zk = registry()
    zk.create("/replication/controller", b'{"version":1,"brokerid":0,"epoch":1}')
    mirror = ZkMirror(zk, TEMPLATE)
    mirror.start()
    del zk.nodes["/replication/controller"]
    data_watches = zk.data_watches.pop("/replication/controller", [])
    child_watches = zk.child_watches.pop("/replication", [])
    for watch in data_watches:
        watch(Event("DELETED", "/replication/controller"))
    assert "/replication/controller" not in mirror.data
    zk.nodes["/replication/controller"] = (b'{"version":1,"brokerid":1,"epoch":2}', 5, 5)
    for watch in child_watches:
        watch(Event("CHILD", "/replication"))
    assert mirror.data["/replication/controller"].value == b'{"version":1,"brokerid":1,"epoch":2}'
    assert len(zk.data_watches["/replication/controller"]) == 1  # watched again, once
