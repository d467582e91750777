"""The nemesis run's network: one network namespace per node, joined by veth pairs to a bridge
in the root namespace (where the clients and the checker run), and partitions cut with
blackhole routes.

Every node (broker or ZooKeeper member) gets a namespace ``nem<tag>-<node>`` with one address
on 10.77.<net>.0/24; the root namespace is the bridge's address .1, so the clients reach every
node, whatever is cut between nodes. ``cut(a, b)`` adds a blackhole route to b's address in a's
namespace and to a's in b's: packets between them are dropped both ways (sockets stay open, as
with a pulled cable or Jepsen's iptables DROP); ``heal`` removes the routes. Needs root and
iproute2 only (no iptables or tc on this machine). ``close`` removes every namespace, veth and
the bridge; ``remove_stale`` clears what a killed run left behind.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable

PREFIX = "nem"


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and result.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def remove_stale(tag: str) -> None:
    """Namespaces and links of an earlier run with this tag (a run killed before its cleanup)."""
    for line in ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(f"{PREFIX}{tag}-"):
            ip("netns", "del", name, check=False)
    ip("link", "del", f"{PREFIX}{tag}br", check=False)


class Network:
    def __init__(self, tag: str, net: int = 77) -> None:
        self.tag, self.net = tag, net
        self.bridge = f"{PREFIX}{tag}br"
        self.nodes: dict[str, str] = {}  # node name -> address
        self.cuts: set[frozenset[str]] = set()

    @property
    def host_address(self) -> str:
        return f"10.{self.net}.0.1"

    def namespace(self, node: str) -> str:
        return f"{PREFIX}{self.tag}-{node}"

    def netns_path(self, node: str) -> str:
        return f"/run/netns/{self.namespace(node)}"

    def wrap(self, node: str, argv: list[str]) -> list[str]:
        """``argv`` run inside the node's namespace (nsenter execs it: the pid is the program's)."""
        return ["nsenter", f"--net={self.netns_path(node)}", *argv]

    def create(self) -> None:
        remove_stale(self.tag)
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.host_address}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")

    def add(self, node: str, host_number: int) -> str:
        """A namespace for ``node`` with address 10.<net>.0.<host_number>; returns the address."""
        ns, address = self.namespace(node), f"10.{self.net}.0.{host_number}"
        outer, inner = f"{PREFIX}{self.tag}{node}"[:15], "eth0"
        ip("link", "del", outer, check=False)  # left by a namespace a stray process kept alive
        ip("netns", "add", ns)
        ip("link", "add", outer, "type", "veth", "peer", "name", inner, "netns", ns)
        ip("link", "set", outer, "master", self.bridge)
        ip("link", "set", outer, "up")
        ip("-n", ns, "addr", "add", f"{address}/24", "dev", inner)
        ip("-n", ns, "link", "set", inner, "up")
        ip("-n", ns, "link", "set", "lo", "up")
        self.nodes[node] = address
        return address

    def _route(self, action: str, node: str, to: str) -> None:
        ip("-n", self.namespace(node), "route", action, "blackhole", f"{self.nodes[to]}/32", check=False)

    def cut(self, a: str, b: str) -> None:
        pair = frozenset((a, b))
        if pair not in self.cuts:
            self.cuts.add(pair)
            self._route("add", a, b)
            self._route("add", b, a)

    def heal(self, a: str, b: str) -> None:
        pair = frozenset((a, b))
        if pair in self.cuts:
            self.cuts.discard(pair)
            self._route("del", a, b)
            self._route("del", b, a)

    def cut_between(self, side_a: Iterable[str], side_b: Iterable[str]) -> list[tuple[str, str]]:
        pairs = [(a, b) for a in side_a for b in side_b if a != b]
        for a, b in pairs:
            self.cut(a, b)
        return pairs

    def heal_all(self) -> None:
        for pair in list(self.cuts):
            self.heal(*sorted(pair))

    def close(self) -> None:
        self.cuts.clear()
        for node in list(self.nodes):
            ip("netns", "del", self.namespace(node), check=False)  # takes its veth pair along
        self.nodes.clear()
        ip("link", "del", self.bridge, check=False)
