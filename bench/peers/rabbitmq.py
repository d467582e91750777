"""RabbitMQ 3.10 (Debian's rabbitmq-server) through pika, over AMQP 0-9-1.

The server runs from /usr/lib/rabbitmq/bin/rabbitmq-server (the /usr/sbin wrapper would switch
to the rabbitmq user) with its node name, Mnesia base, log base, config and plugin file in the
run's directory, listening on 127.0.0.1 only, with an epmd of its own on a free loopback port
(so none lingers after the run, and a system epmd is not touched). Erlang's schedulers do not
busy-wait (``+sbwt none``), which on a 2-core machine would take CPU from the clients.

Each test has a durable classic queue of its own, and every message is persistent
(delivery_mode 2): RabbitMQ writes it to the queue index / message store on disk and fsyncs
only when a publisher confirm or a queue sync needs it, so with no confirms there is no
per-message fsync. Producers publish without confirms (fire-and-forget, the fastest mode that
still stores persistently) through pika's SelectConnection, handing the ioloop 1 (b1) or 50
(b50) publishes per turn; pika sends every frame with a send() of its own, so AMQP 0-9-1 and
pika have no way to write 50 messages at once. The clock stops when a passive queue.declare
counts all ``n`` messages in the queue. Consumers use basic.consume with a prefetch of 5,000
and one cumulative ack (multiple=True) per 1,000 messages.
"""

from __future__ import annotations

import os
import subprocess
import time

import pika

from bench.peers.base import Go, Peer
from bench.peers.harness import ServerProcess, debian_version, free_port, latency_ns, latency_summary, paced, \
    payload_pool, stamped_payload

SCRIPT = "/usr/lib/rabbitmq/bin/rabbitmq-server"
EPMD = "/usr/bin/epmd"
PREFETCH = 5000
ACK_EVERY = 1000
PERSISTENT = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)


def _parameters(port: int) -> pika.ConnectionParameters:
    return pika.ConnectionParameters("127.0.0.1", port, connection_attempts=1, heartbeat=0)


class RabbitServer(ServerProcess):
    name = "rabbitmq"
    start_timeout_s = 120.0

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        self.port = free_port()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.data_dir = os.path.join(directory, "mnesia")
        self._epmd = None
        with open(os.path.join(directory, "rabbitmq.conf"), "w") as conf:
            conf.write(f"listeners.tcp.1 = 127.0.0.1:{self.port}\n"
                       "loopback_users = none\n"
                       "disk_free_limit.absolute = 100MB\n"
                       "log.console = false\n"
                       "log.file.level = warning\n")
        with open(os.path.join(directory, "enabled_plugins"), "w") as plugins:
            plugins.write("[].\n")

    def command(self):
        env = {"HOME": self.directory,  # its .erlang.cookie
               "ERL_EPMD_PORT": str(self.epmd_port), "ERL_EPMD_ADDRESS": "127.0.0.1",
               "RABBITMQ_NODENAME": "bench@localhost", "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
               "RABBITMQ_DIST_PORT": str(self.dist_port),
               "RABBITMQ_MNESIA_BASE": self.data_dir, "RABBITMQ_LOG_BASE": os.path.join(self.directory, "log"),
               "RABBITMQ_CONFIG_FILE": os.path.join(self.directory, "rabbitmq"),
               "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(self.directory, "enabled_plugins"),
               "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "+sbwt none +sbwtdcpu none +sbwtdio none"}
        return [SCRIPT], env

    def start(self) -> "RabbitServer":
        with open(os.path.join(self.directory, "epmd.out"), "ab") as out:
            self._epmd = subprocess.Popen([EPMD, "-address", "127.0.0.1", "-port", str(self.epmd_port)],
                                          stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=True)
        try:
            return super().start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            if self._epmd is not None:
                self._epmd.kill()
                self._epmd.wait()
                self._epmd = None

    def ready(self) -> bool:
        try:
            pika.BlockingConnection(_parameters(self.port)).close()
            return True
        except pika.exceptions.AMQPError:
            return False

    def version(self) -> str:
        return debian_version("rabbitmq-server")


class RabbitMQ(Peer):
    key = "rabbitmq"
    label = "RabbitMQ"
    settings = {
        "server": "rabbitmq-server, listener 127.0.0.1 only, no plugins, Erlang +sbwt none",
        "persistence": "durable classic queue per test, persistent messages (delivery_mode 2); "
                       "written to the queue index / message store, no per-message fsync (no confirms)",
        "produce": "basic.publish without publisher confirms, pika SelectConnection with 1 (b1) or 50 "
                   "(b50) publishes per ioloop turn; done when a passive queue.declare counts n",
        "consume": f"basic.consume, prefetch {PREFETCH:,}, cumulative ack every {ACK_EVERY:,}",
        "latency": "the same consumer, subscribed before the producer starts; producer "
                   "BlockingChannel.basic_publish per message",
    }

    def make_server(self, directory: str) -> RabbitServer:
        return RabbitServer(directory)

    def create(self, server, dest: str) -> None:
        connection = pika.BlockingConnection(_parameters(server.port))
        connection.channel().queue_declare(dest, durable=True)
        connection.close()

    def delete(self, server, dest: str) -> None:
        connection = pika.BlockingConnection(_parameters(server.port))
        connection.channel().queue_delete(dest)
        connection.close()

    def produce(self, *, port: int, dest: str, n: int, batch: int, go: Go, **_: object) -> dict:
        counter = pika.BlockingConnection(_parameters(port))
        count_channel = counter.channel()

        def queued() -> int:
            return count_channel.queue_declare(dest, passive=True).method.message_count
        start = queued()
        pool = payload_pool()
        size = len(pool)
        state: dict = {}

        def on_open(connection) -> None:
            connection.channel(on_open_callback=on_channel)

        def on_channel(channel) -> None:
            state["channel"] = channel
            connection.ioloop.stop()

        def on_error(_connection, error) -> None:
            state["error"] = error
            connection.ioloop.stop()

        def on_close(_connection, _reason) -> None:
            connection.ioloop.stop()

        connection = pika.SelectConnection(_parameters(port), on_open_callback=on_open,
                                           on_open_error_callback=on_error, on_close_callback=on_close)
        connection.ioloop.start()
        if "error" in state:
            raise RuntimeError(f"connecting to RabbitMQ: {state['error']}")
        publish = state["channel"].basic_publish
        ioloop = connection.ioloop
        position = [0]
        times: dict[str, float] = {}

        def publish_some() -> None:
            first = position[0]
            last = min(first + batch, n)
            for i in range(first, last):
                publish("", dest, pool[i % size], PERSISTENT)
            position[0] = last
            if last < n:
                ioloop.call_later(0, publish_some)  # the ioloop writes these, then calls again
            else:
                times["sent"] = time.perf_counter()
                ioloop.call_later(0, check)

        def check() -> None:  # the ioloop keeps writing what is buffered in between
            if queued() < start + n:
                ioloop.call_later(0.002, check)
            else:
                ioloop.stop()

        go()
        started = time.perf_counter()
        ioloop.call_later(0, publish_some)
        ioloop.start()
        done = time.perf_counter()
        count = queued()
        connection.close()
        ioloop.start()  # until on_close stops it
        counter.close()
        if count != start + n:
            raise RuntimeError(f"{dest}: {count - start} messages queued, expected {n}")
        return {"seconds": done - started, "sent_s": times["sent"] - started}

    def _drain(self, port: int, dest: str, n: int, go: Go, on_body, *, subscribe_first: bool) -> float:
        connection = pika.BlockingConnection(_parameters(port))
        channel = connection.channel()
        channel.basic_qos(prefetch_count=PREFETCH)
        got = [0]

        def on_message(ch, method, _properties, body) -> None:
            on_body(body)
            got[0] += 1
            if got[0] % ACK_EVERY == 0 or got[0] == n:
                ch.basic_ack(method.delivery_tag, multiple=True)
            if got[0] == n:
                ch.stop_consuming()

        if subscribe_first:
            channel.basic_consume(dest, on_message)
        go()
        started = time.perf_counter()
        if not subscribe_first:
            channel.basic_consume(dest, on_message)
        channel.start_consuming()
        seconds = time.perf_counter() - started
        connection.close()
        return seconds

    def consume(self, *, port: int, dest: str, n: int, go: Go, **_: object) -> dict:
        counted = [0]

        def count(body: bytes) -> None:
            counted[0] += len(body)
        return {"seconds": self._drain(port, dest, n, go, count, subscribe_first=False),
                "payload_bytes": counted[0]}

    def latency_consume(self, *, port: int, dest: str, n: int, go: Go, **_: object) -> dict:
        samples: list[int] = []
        self._drain(port, dest, n, go, lambda body: samples.append(latency_ns(body, time.monotonic_ns())),
                    subscribe_first=True)
        return latency_summary(samples)

    def latency_produce(self, *, port: int, dest: str, n: int, rate: float, go: Go, **_: object) -> dict:
        connection = pika.BlockingConnection(_parameters(port))
        channel = connection.channel()
        go()
        started = time.perf_counter()
        for _ in paced(n, rate):
            channel.basic_publish("", dest, stamped_payload(), PERSISTENT)
        connection.close()
        return {"seconds": time.perf_counter() - started}
