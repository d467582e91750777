"""``make run``: a local ZooKeeper and one broker on loopback, data under ./var/;
``make run BROKERS=3`` (``--brokers 3``): three brokers, a cluster for replication.

ZooKeeper is started from etc/zookeeper.cfg unless one already answers on its address
(then it is left alone); the brokers run under twistd with etc/server.properties. Every
child runs in its own session, so Ctrl-C reaches only this process, which stops the brokers
first (they deregister and flush while ZooKeeper is still there), then ZooKeeper. Run it
from the repository root: the config files' paths are relative to it.

One broker is started exactly as server.properties says. With N brokers, broker i differs
from it only where N brokers on one machine must: ``--broker-id i``, the wire port
``port + 100 i`` (9092, 9192, 9292), ``--log-dir var/broker-i/kafka-logs``, its debug port
``9093 + 100 i``, its admin console ``8080 + i`` (8180 is make spark-cluster's master
UI) and the listener of the modern Kafka protocol ``kafka.port + 100 i`` (9094, 9194, 9294).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from twisted_broker.local_zookeeper import (
    ZooKeeperServer,
    ZooKeeperStartError,
    ignore_stop_signals,
    is_serving,
)
from twisted_broker.properties import read_properties

log = logging.getLogger(__name__)

ZOOKEEPER_CONFIG = Path("etc/zookeeper.cfg")
SERVER_CONFIG = Path("etc/server.properties")
BROKER_STOP_TIMEOUT_S = 15.0
MAX_BROKERS = 9  # broker 9's ports end at 9992/9993; its console at 8089
PORT_STEP = 100  # between brokers' wire and debug ports (README.md's three-broker table)
CONSOLE_PORT = 8080
DEBUG_PORT = 9093


@dataclass(frozen=True)
class BrokerPlan:
    """What one broker of the local cluster gets; None: what server.properties says."""

    broker_id: int | None
    port: int | None
    log_dir: str | None
    console_port: int
    debug_port: int
    kafka_port: int | None = None  # the modern protocol's listener; None: kafka.port's


def plan_brokers(count: int, *, base_port: int, console_port: int = CONSOLE_PORT,
                 debug_port: int = DEBUG_PORT, kafka_port: int = 0) -> list[BrokerPlan]:
    """The brokers of a ``count``-broker cluster; one is server.properties' broker itself.
    ``kafka_port`` 0: server.properties turns the modern listener off, for all of them."""
    if count == 1:
        return [BrokerPlan(None, None, None, console_port, debug_port)]
    return [BrokerPlan(i, base_port + PORT_STEP * i, f"var/broker-{i}/kafka-logs", console_port + i,
                       debug_port + PORT_STEP * i, kafka_port + PORT_STEP * i if kafka_port else None)
            for i in range(count)]


def broker_command(plan: BrokerPlan | None = None) -> list[str]:
    """The twistd command line that runs one broker in the foreground."""
    plan = plan or plan_brokers(1, base_port=0)[0]
    twistd = Path(sys.executable).with_name("twistd")  # the venv's, next to its python
    kafka = plan.kafka_port and f"tcp:{plan.kafka_port}:interface=127.0.0.1"
    overrides = [(option, value) for option, value in (
        ("--broker-id", plan.broker_id), ("--port", plan.port), ("--log-dir", plan.log_dir),
        ("--kafka-endpoint", kafka)) if value]
    # The console and debug ports are off by default in twistd (tests start many brokers);
    # the single-machine cluster has them on their README.md ports, on loopback.
    return [str(twistd) if twistd.exists() else "twistd", "-n", "--pidfile=", "--logfile=-",
            "broker", "--config", str(SERVER_CONFIG), *(str(part) for pair in overrides for part in pair),
            "--webui", f"tcp:{plan.console_port}:interface=127.0.0.1",
            "--debug", f"tcp:{plan.debug_port}:interface=127.0.0.1"]


def stop_brokers(brokers: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every broker at once (each moves its leaderships away while the others still
    run), wait for them, SIGKILL one that hangs."""
    for broker in brokers:
        if broker.poll() is None:
            broker.terminate()
    for broker in brokers:
        try:
            broker.wait(BROKER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.warning("broker ignored SIGTERM for %g s; killing it", BROKER_STOP_TIMEOUT_S)
            broker.kill()
            broker.wait()
    if brokers:
        log.info("%s stopped", "broker" if len(brokers) == 1 else f"{len(brokers)} brokers")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m twisted_broker.devcluster", description=__doc__.split("\n")[0])
    parser.add_argument("--brokers", type=int, default=1, choices=range(1, MAX_BROKERS + 1), metavar="N",
                        help=f"how many brokers, 1 to {MAX_BROKERS} (default 1; make run BROKERS=N)")
    parser.add_argument("--console-port", type=int, default=CONSOLE_PORT, metavar="PORT",
                        help="broker i's admin console listens on PORT + i (default %(default)s)")
    parser.add_argument("--debug-port", type=int, default=DEBUG_PORT, metavar="PORT",
                        help=f"broker i's debug port is PORT + {PORT_STEP} i (default %(default)s)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run ZooKeeper and the brokers until SIGINT or SIGTERM; return the exit status."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    for config in (ZOOKEEPER_CONFIG, SERVER_CONFIG):
        if not config.exists():
            log.error("%s not found: run this from the repository root (make run)", config)
            return 1
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop as Ctrl-C does
    configured = ZooKeeperServer.from_config(ZOOKEEPER_CONFIG)
    address = configured.connect_string
    zookeeper: ZooKeeperServer | None = configured
    if is_serving(configured.host, configured.port):
        log.info("using the ZooKeeper already serving on %s", address)
        zookeeper = None  # someone else's: leave it running
    properties = read_properties(SERVER_CONFIG)
    plans = plan_brokers(args.brokers, base_port=int(properties.get("port", "9092")),
                         console_port=args.console_port, debug_port=args.debug_port,
                         kafka_port=int(properties.get("kafka.port", "0")))
    brokers: list[subprocess.Popen[bytes]] = []
    try:
        if zookeeper is not None:
            zookeeper.start()
        if importlib.util.find_spec("twisted_broker.tap") is None:
            print(f"the broker comes with issue 2/7; ZooKeeper is running on {address}",
                  flush=True)
        else:
            for plan in plans:
                if plan.broker_id is not None:
                    log.info("broker %d: port %d, Kafka clients' port %s, admin console http://127.0.0.1:%d/, "
                             "debug port %d, logs in %s", plan.broker_id, plan.port, plan.kafka_port or "off",
                             plan.console_port, plan.debug_port, plan.log_dir)
                brokers.append(subprocess.Popen(broker_command(plan), stdin=subprocess.DEVNULL,
                                                start_new_session=True))
        while (all(broker.poll() is None for broker in brokers)
               and (zookeeper is None or zookeeper.running)):
            time.sleep(0.5)
        exited = [broker for broker in brokers if broker.returncode is not None]
        if exited:
            log.error("%s exited by itself (status %d)", "the broker" if len(brokers) == 1 else "a broker",
                      exited[0].returncode)
        elif zookeeper is not None:
            log.error("ZooKeeper exited by itself; its log ends:\n%s", zookeeper.log_tail())
        return 1
    except (ZooKeeperStartError, FileNotFoundError) as e:
        log.error("%s", e)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        ignore_stop_signals()
        stop_brokers(brokers)
        if zookeeper is not None:
            zookeeper.stop()


if __name__ == "__main__":
    raise SystemExit(main())
