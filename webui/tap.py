"""``twistd webui``: the admin console alone, for a whole cluster.

    twistd -n webui --zk 127.0.0.1:2181 --listen tcp:8080:interface=127.0.0.1

Read-only unless ``--allow-admin-actions``. The composition root: the one module of the
package that names the global reactor.
"""

from __future__ import annotations

import os

from twisted.internet.endpoints import serverFromString
from twisted.python import usage

from twisted_broker.twisted_logging import forward_logging
from webui.service import ConsoleService

DEFAULT_LISTEN = "tcp:8080:interface=127.0.0.1"


class Options(usage.Options):
    optParameters = [
        ["zk", None, None, "ZooKeeper connect string host:port[,...][/chroot] (required)"],
        ["listen", None, DEFAULT_LISTEN, "Twisted endpoint of the console"],
        ["lag-sample-interval", None, "30", "seconds between two samples of every group's lag"],
        ["refresh", None, "5", "seconds between two refreshes of an open page (0: never)"],
        ["zk-session-timeout-ms", None, "6000", "ZooKeeper session timeout"],
        ["port-file", None, None, "write the bound port to this file once started (for tests)"],
    ]
    optFlags = [["allow-admin-actions", None,
                 "enable the one write action: resetting a stopped group's offsets"]]

    def postOptions(self) -> None:
        if not self["zk"]:
            raise usage.UsageError("--zk is required (the cluster's zk.connect)")
        for option in ("lag-sample-interval", "refresh", "zk-session-timeout-ms"):
            try:
                value = float(self[option])
            except ValueError:
                raise usage.UsageError(f"--{option} must be a number") from None
            if value < 0 or (value == 0 and option != "refresh"):
                raise usage.UsageError(f"--{option} must be positive")
            self[option] = value


def makeService(options: Options) -> ConsoleService:
    from twisted.internet import reactor  # the composition root is the one place that names it

    forward_logging()
    return ConsoleService(
        serverFromString(reactor, options["listen"]), reactor=reactor, zk_connect=options["zk"],
        allow_admin_actions=bool(options["allow-admin-actions"]),
        lag_sample_interval_s=options["lag-sample-interval"], refresh_s=options["refresh"],
        zk_session_timeout_ms=int(options["zk-session-timeout-ms"]),
        port_file=options["port-file"] and os.path.abspath(options["port-file"]))
