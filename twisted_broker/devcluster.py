"""``make run``: a local ZooKeeper and one broker on loopback, data under ./var/.

ZooKeeper is started from etc/zookeeper.cfg unless one already answers on its address
(then it is left alone); the broker runs under twistd with etc/server.properties. Both
children run in their own sessions, so Ctrl-C reaches only this process, which stops the
broker first (it deregisters and flushes while ZooKeeper is still there), then ZooKeeper.
Run it from the repository root: the config files' paths are relative to it.
"""

from __future__ import annotations

import importlib.util
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path

from twisted_broker.local_zookeeper import (
    ZooKeeperServer,
    ZooKeeperStartError,
    ignore_stop_signals,
    is_serving,
)

log = logging.getLogger(__name__)

ZOOKEEPER_CONFIG = Path("etc/zookeeper.cfg")
SERVER_CONFIG = Path("etc/server.properties")
BROKER_STOP_TIMEOUT_S = 15.0


def broker_command() -> list[str]:
    """The twistd command line that runs one broker in the foreground."""
    twistd = Path(sys.executable).with_name("twistd")  # the venv's, next to its python
    # The console and debug ports are off by default in twistd (tests start many brokers);
    # the single-machine cluster has them on their INTERFACES.md ports, on loopback.
    return [str(twistd) if twistd.exists() else "twistd", "-n", "--pidfile=", "--logfile=-",
            "broker", "--config", str(SERVER_CONFIG),
            "--webui", "tcp:8080:interface=127.0.0.1", "--debug", "tcp:9093:interface=127.0.0.1"]


def stop_broker(broker: subprocess.Popen[bytes]) -> None:
    """SIGTERM the broker, wait for it, SIGKILL it if it hangs."""
    if broker.poll() is None:
        broker.terminate()
        try:
            broker.wait(BROKER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.warning("broker ignored SIGTERM for %g s; killing it", BROKER_STOP_TIMEOUT_S)
            broker.kill()
            broker.wait()
    log.info("broker stopped")


def main() -> int:
    """Run ZooKeeper and a broker until SIGINT or SIGTERM; return the exit status."""
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
    broker: subprocess.Popen[bytes] | None = None
    try:
        if zookeeper is not None:
            zookeeper.start()
        if importlib.util.find_spec("twisted_broker.tap") is None:
            print(f"the broker comes with issue 2/7; ZooKeeper is running on {address}",
                  flush=True)
        else:
            broker = subprocess.Popen(broker_command(), stdin=subprocess.DEVNULL,
                                      start_new_session=True)
        while ((broker is None or broker.poll() is None)
               and (zookeeper is None or zookeeper.running)):
            time.sleep(0.5)
        if broker is not None and broker.returncode is not None:
            log.error("the broker exited by itself (status %d)", broker.returncode)
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
        if broker is not None:
            stop_broker(broker)
        if zookeeper is not None:
            zookeeper.stop()


if __name__ == "__main__":
    raise SystemExit(main())
