"""ActiveMQ 5.17 "Classic" (Debian's activemq) through stomp.py, over STOMP 1.2.

The broker is Debian's activemq.jar run by java in the foreground with an activemq.xml of
the run's own: one STOMP connector on 127.0.0.1 (with ``tcpNoDelay``, and TCP_NODELAY set on
stomp.py's socket too: every other client here turns Nagle off), no JMX, no advisories, no scheduler, and the
default KahaDB store with ``journalDiskSyncStrategy="periodic"`` (the journal is fsynced once a
second, not per message; ActiveMQ's default fsyncs every persistent send) and
``preallocationScope="none"`` (else each 32 MiB journal file is allocated whole when opened,
and the data directory's growth would measure the preallocation, not the messages). Memory
for messages is 70% of the heap, as in ActiveMQ's own activemq.xml (without it the limit is
the whole heap). A test's queue is drained after it (``delete``).

Every message is sent with ``persistent:true`` to a queue of its own per test. Producers send
without receipts (ActiveMQ then stores them asynchronously, with no reply), 1 SEND frame per
write (b1, ``Connection.send``) or 50 frames, encoded by stomp.py, in one write (b50). Only
the last message asks for a receipt: ActiveMQ handles a connection's frames in order and
answers a persistent send's receipt once it is stored, so the receipt stops the clock. The
consumer subscribes with ``ack:client`` and ``activemq.prefetchSize:5000`` and acks
cumulatively every 100 messages (the queue pages 200 messages at a time into memory for
dispatch, so acks must come before 200 are outstanding).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time

import stomp
from stomp.utils import Frame, convert_frame, pack

from bench.peers.base import Go, Peer
from bench.peers.harness import ServerProcess, debian_version, free_port, latency_ns, latency_summary, paced, \
    payload_pool, port_open, stamped_payload

HOME = "/usr/share/activemq"
PREFETCH = 5000
ACK_EVERY = 100
JVM_OPTIONS = ["-Xms1g", "-Xmx1g"]
# What Debian's /usr/bin/activemq passes to Java 9 and later.
JAVA_MODULE_OPTIONS = [
    "--add-reads=java.xml=java.logging",
    *(f"--add-opens=java.base/{package}=ALL-UNNAMED" for package in (
        "java.security", "java.net", "java.lang", "java.util", "java.util.concurrent",
        "java.util.concurrent.atomic")),
    "--add-opens=java.naming/javax.naming.spi=ALL-UNNAMED",
    "--add-opens=java.rmi/sun.rmi.transport.tcp=ALL-UNNAMED",
]

CONFIG = """<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="bench" useJmx="false"
          persistent="true" advisorySupport="false" schedulerSupport="false" dataDirectory="{data}">
    <systemUsage>
      <systemUsage>
        <memoryUsage><memoryUsage percentOfJvmHeap="70"/></memoryUsage>
      </systemUsage>
    </systemUsage>
    <persistenceAdapter>
      <kahaDB directory="{data}/kahadb" journalDiskSyncStrategy="periodic" journalDiskSyncInterval="1000"
              preallocationScope="none"/>
    </persistenceAdapter>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:{port}?transport.tcpNoDelay=true"/>
    </transportConnectors>
  </broker>
</beans>
"""


def _connect(port: int, listener: stomp.ConnectionListener | None = None) -> stomp.Connection12:
    # auto_decode off: bodies arrive as bytes, as every other client's do.
    connection = stomp.Connection12([("127.0.0.1", port)], heartbeats=(0, 0), auto_decode=False)
    if listener is not None:
        connection.set_listener("bench", listener)
    connection.connect(wait=True)
    # Every other client here (and ActiveMQ's connector, by its URI) turns Nagle off; stomp.py
    # does not, and with Nagle a lone small SEND or ACK can wait for a delayed ACK (~40 ms).
    connection.transport.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return connection


class ActiveMQServer(ServerProcess):
    name = "activemq"
    start_timeout_s = 120.0

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        self.port = free_port()
        self.data_dir = os.path.join(directory, "data")
        self.conf_dir = os.path.join(directory, "conf")
        os.makedirs(self.conf_dir, exist_ok=True)
        self.config_file = os.path.join(self.conf_dir, "activemq.xml")
        with open(self.config_file, "w") as config:
            config.write(CONFIG.format(data=self.data_dir, port=self.port))

    def command(self):
        java = shutil.which("java") or "java"
        return [java, *JVM_OPTIONS, *JAVA_MODULE_OPTIONS,
                f"-Dactivemq.classpath={self.conf_dir}", f"-Dactivemq.home={HOME}",
                f"-Dactivemq.base={self.directory}", f"-Dactivemq.conf={self.conf_dir}",
                f"-Dactivemq.data={self.data_dir}",
                "-jar", f"{HOME}/bin/activemq.jar", "start", f"xbean:file:{self.config_file}"], {}

    def ready(self) -> bool:
        if not port_open(self.port):
            return False
        try:
            _connect(self.port).disconnect()
            return True
        except (stomp.exception.StompException, OSError):
            return False

    def version(self) -> str:
        return debian_version("activemq")


class _Listener(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.receipts: dict[str, threading.Event] = {}
        self.errors: list[str] = []

    def expect_receipt(self, receipt: str) -> threading.Event:
        self.receipts[receipt] = event = threading.Event()
        return event

    def on_receipt(self, frame) -> None:
        if event := self.receipts.get(frame.headers.get("receipt-id")):
            event.set()

    def on_error(self, frame) -> None:
        self.errors.append(f"{frame.headers} {frame.body!r}")
        for event in self.receipts.values():
            event.set()


class ActiveMQ(Peer):
    key = "activemq"
    label = "ActiveMQ"
    settings = {
        "server": "activemq.jar (Debian) in the foreground, STOMP connector on 127.0.0.1 with tcpNoDelay, "
                  f"JMX, advisories and scheduler off, JVM {' '.join(JVM_OPTIONS)}; TCP_NODELAY on the client too",
        "persistence": "persistent:true messages, KahaDB journal with journalDiskSyncStrategy=periodic "
                       "(fsync once a second, no per-message fsync), preallocationScope=none",
        "produce": "SEND without receipts (ActiveMQ stores async sends without a reply): 1 frame per write "
                   "(b1) or 50 frames per write (b50); only the last message asks for a receipt",
        "consume": f"SUBSCRIBE ack:client, activemq.prefetchSize:{PREFETCH:,}, cumulative ACK every {ACK_EVERY}",
        "latency": "the same subscription, made before the producer starts; producer one SEND per message",
    }

    def make_server(self, directory: str) -> ActiveMQServer:
        return ActiveMQServer(directory)

    def delete(self, server, dest: str) -> None:
        """Drain the queue (STOMP cannot delete one; JMX is off): the b1 test's queue is never
        consumed, and three rounds of such queues held in memory ran the broker out of heap.
        KahaDB then cleans its journal up by itself."""
        last = [time.monotonic()]

        class Drain(stomp.ConnectionListener):
            def on_message(self, frame) -> None:
                last[0] = time.monotonic()

        connection = _connect(server.port, Drain())
        connection.subscribe(self._queue(dest), id="drain", ack="auto",
                             headers={"activemq.prefetchSize": str(PREFETCH)})
        while time.monotonic() - last[0] < 2.0:  # empty: nothing came for 2 s
            time.sleep(0.1)
        connection.disconnect()

    @staticmethod
    def _queue(dest: str) -> str:
        return f"/queue/{dest}"

    def produce(self, *, port: int, dest: str, n: int, batch: int, go: Go, **_: object) -> dict:
        listener = _Listener()
        connection = _connect(port, listener)
        queue = self._queue(dest)
        pool = payload_pool()
        size = len(pool)
        persistent = {"persistent": "true"}
        stored = listener.expect_receipt("last")
        send_frames = connection.transport.send
        go()
        started = time.perf_counter()
        if batch == 1:
            send = connection.send
            for i in range(n - 1):
                send(queue, pool[i % size], headers=persistent)
            send(queue, pool[(n - 1) % size], headers={**persistent, "receipt": "last"})
        else:
            for first in range(0, n, batch):
                last = min(first + batch, n)
                frames = []
                for i in range(first, last):
                    headers = {"destination": queue, "persistent": "true", "content-length": 0}
                    if i == n - 1:
                        headers["receipt"] = "last"
                    frames.append(pack(convert_frame(Frame("SEND", headers, pool[i % size]))))
                send_frames(b"".join(frames))
        sent = time.perf_counter()
        if not stored.wait(600):
            raise TimeoutError(f"{dest}: no receipt for the last message")
        done = time.perf_counter()
        connection.disconnect()
        if listener.errors:
            raise RuntimeError(f"{dest}: {listener.errors[:3]}")
        return {"seconds": done - started, "sent_s": sent - started}

    def _drain(self, port: int, dest: str, n: int, go: Go, on_body, *, subscribe_first: bool) -> float:
        finished = threading.Event()
        got = [0]
        connection: stomp.Connection12

        class Consumer(_Listener):
            def on_message(self, frame) -> None:
                on_body(frame.body)
                got[0] += 1
                if got[0] % ACK_EVERY == 0 or got[0] == n:
                    connection.ack(frame.headers["ack"])
                if got[0] == n:
                    finished.set()

        listener = Consumer()
        connection = _connect(port, listener)

        def subscribe() -> None:
            connection.subscribe(self._queue(dest), id="bench", ack="client",
                                 headers={"activemq.prefetchSize": str(PREFETCH)})
        if subscribe_first:
            subscribe()
        go()
        started = time.perf_counter()
        if not subscribe_first:
            subscribe()
        if not finished.wait(600):
            raise TimeoutError(f"{dest}: {got[0]} of {n} messages received {listener.errors[:3]}")
        seconds = time.perf_counter() - started
        connection.disconnect()
        return seconds

    def consume(self, *, port: int, dest: str, n: int, go: Go, **_: object) -> dict:
        counted = [0]

        def count(body) -> None:
            counted[0] += len(body)
        return {"seconds": self._drain(port, dest, n, go, count, subscribe_first=False),
                "payload_bytes": counted[0]}

    def latency_consume(self, *, port: int, dest: str, n: int, go: Go, **_: object) -> dict:
        samples: list[int] = []

        self._drain(port, dest, n, go, lambda body: samples.append(latency_ns(body, time.monotonic_ns())),
                    subscribe_first=True)
        return latency_summary(samples)

    def latency_produce(self, *, port: int, dest: str, n: int, rate: float, go: Go, **_: object) -> dict:
        connection = _connect(port)
        queue = self._queue(dest)
        go()
        started = time.perf_counter()
        for _ in paced(n, rate):
            connection.send(queue, stamped_payload(), headers={"persistent": "true"})
        connection.disconnect()
        return {"seconds": time.perf_counter() - started}
