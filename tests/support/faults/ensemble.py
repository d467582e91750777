"""A real three-node ZooKeeper ensemble on loopback for tests (Debian's ZooKeeper, through
local_zookeeper.ZooKeeperServer with ``peers``): started together, waited on until it has a
quorum, each member killable with SIGKILL."""

from __future__ import annotations

import time
from pathlib import Path

from twisted_broker.local_zookeeper import Peer, ZooKeeperServer, free_port, server_mode


class Ensemble:
    def __init__(self, root: Path, size: int = 3, tick_time_ms: int = 200) -> None:
        peers = [Peer(i, "127.0.0.1", free_port(), free_port(), free_port()) for i in range(1, size + 1)]
        self.servers = {p.server_id: ZooKeeperServer(root / f"zk-{p.server_id}", p.client_port, tick_time_ms=tick_time_ms,
                                                     server_id=p.server_id, peers=peers) for p in peers}

    @property
    def connect_string(self) -> str:
        """Every member, as a client's (and zk.connect's) host list."""
        return ",".join(s.connect_string for s in self.servers.values())

    def modes(self) -> dict[int, str | None]:
        return {i: server_mode(s.host, s.port) if s.running else None for i, s in self.servers.items()}

    def leader(self) -> int | None:
        return next((i for i, mode in self.modes().items() if mode == "leader"), None)

    def wait_for_quorum(self, timeout_s: float = 60.0) -> int:
        """Wait until one running member leads and every other running member follows; the leader's id."""
        deadline = time.monotonic() + timeout_s
        while True:
            modes = {i: m for i, m in self.modes().items() if self.servers[i].running}
            if sorted(map(str, modes.values())) == ["follower"] * (len(modes) - 1) + ["leader"]:
                return next(i for i, m in modes.items() if m == "leader")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no quorum within {timeout_s} s: {modes}")
            time.sleep(0.1)

    def start(self) -> "Ensemble":
        for server in self.servers.values():
            server.start()
        self.wait_for_quorum()
        return self

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()
