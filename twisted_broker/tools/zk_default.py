"""Where ``--zk`` points when it is not given, and the one line that says nobody answered there.

The default is, first found: the environment variable ``TWISTED_BROKER_ZK`` (a chroot suffix
included), the ``zk.connect`` of ``etc/server.properties`` (in the working directory, as
``twistd broker`` reads it, else in the project's checkout), then 127.0.0.1:2181 (that file's
own value, and ZooKeeper's port). So on the machine ``make run`` started, no subcommand needs
``--zk``. Each default remembers its source, so an error can say where it looked.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from twisted_broker.config import ConfigError, read_properties

ENV_VAR = "TWISTED_BROKER_ZK"
SERVER_PROPERTIES = "etc/server.properties"  # tap.DEFAULT_CONFIG: the broker's own default
FALLBACK = "127.0.0.1:2181"
FALLBACK_SOURCE = "the built-in default"
# The checkout this package runs from (an editable install, or the tests): where make run is.
_PROJECT_PROPERTIES = Path(__file__).resolve().parents[2] / SERVER_PROPERTIES


@dataclass(frozen=True)
class ZkDefault:
    connect: str  # host:port[,host:port...][/chroot]
    source: str  # ENV_VAR, the properties file's path, or FALLBACK_SOURCE


def default_zk_connect(environ: Mapping[str, str] = os.environ, cwd: Path | None = None) -> ZkDefault:
    """The ``--zk`` a subcommand uses when given neither ``--zk`` nor ``--broker-list``.

    Reads ``environ`` and at most two properties files; never raises (an unreadable or
    malformed file is passed over, as a missing one is). The value is not checked here:
    the ``--zk`` argument's type checks it, naming the source.
    """
    if connect := environ.get(ENV_VAR, "").strip():
        return ZkDefault(connect, ENV_VAR)
    relative = Path(SERVER_PROPERTIES)
    for path, shown in (((cwd or Path.cwd()) / relative, relative), (_PROJECT_PROPERTIES, _PROJECT_PROPERTIES)):
        try:
            connect = read_properties(path).get("zk.connect", "").strip()
        except (OSError, ConfigError, UnicodeDecodeError):
            continue
        if connect:
            return ZkDefault(connect, str(shown))
    return ZkDefault(FALLBACK, FALLBACK_SOURCE)


def zk_help(default: ZkDefault) -> str:
    """The ``--help`` text of ``--zk``, its default and that default's source included."""
    override = "" if default.source == ENV_VAR else f"; {ENV_VAR} overrides it"
    return (f"ZooKeeper of the cluster, HOST:PORT[,HOST:PORT...][/CHROOT] (default: {default.connect}, "
            f"from {default.source}{override})")


def not_answering(connect: str, source: str) -> str:
    """The one-line error for a ZooKeeper that does not answer at ``connect``."""
    return f"no ZooKeeper answers at {connect} (from {source}; set --zk or {ENV_VAR} to look elsewhere)"
