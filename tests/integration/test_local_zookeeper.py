"""A real ZooKeeper from Debian's package, started and stopped by ZooKeeperServer."""

import socket

import pytest
from kazoo.client import KazooClient

from twisted_broker.local_zookeeper import ZooKeeperServer, ZooKeeperStartError, is_serving


def test_server_on_a_free_port_serves_znodes_and_closes_its_port_on_stop(tmp_path):
    server = ZooKeeperServer(tmp_path / "zookeeper")
    server.start()
    try:
        assert server.port != 0
        assert server.connect_string == f"127.0.0.1:{server.port}"
        assert is_serving("127.0.0.1", server.port)
        client = KazooClient(hosts=server.connect_string, timeout=2.0)
        client.start(timeout=10)
        try:
            client.create("/t/greeting", b"hello", makepath=True)
            data, stat = client.get("/t/greeting")
            assert (data, stat.version) == (b"hello", 0)
        finally:
            client.stop()
            client.close()
    finally:
        server.stop()
    assert not server.running
    assert not is_serving("127.0.0.1", server.port)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()


def test_context_manager_stops_the_server(tmp_path):
    with ZooKeeperServer(tmp_path / "zookeeper") as server:
        assert server.running
    assert not server.running and not is_serving("127.0.0.1", server.port)


def test_server_that_cannot_bind_raises_with_the_tail_of_its_log(tmp_path):
    # A plain listener holds the port: it accepts connections but never answers ruok.
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        server = ZooKeeperServer(tmp_path / "zookeeper", port)
        with pytest.raises(ZooKeeperStartError, match="(?s)exited.*Address already in use"):
            server.start()
    assert not server.running
