"""``twistd webui``: the admin console alone, for a whole cluster.

    twistd -n webui --zk 127.0.0.1:2181 --listen tcp:8080:interface=127.0.0.1

Read-only unless ``--allow-admin-actions``. Bound beyond loopback (or ``--require-login``) it
asks for a login; with ``--authorizer-class-name`` its pages follow the ACLs
(docs/security.md, "The console and the debug port"). The composition root: the one module
of the package that names the global reactor.
"""

from __future__ import annotations

import os

from twisted.internet.endpoints import serverFromString
from twisted.python import usage

from twisted_broker.config import ACL_AUTHORIZER_NAMES
from twisted_broker.security.acl import parse_super_users
from twisted_broker.security.authorizer import AclAuthorizer
from twisted_broker.twisted_logging import forward_logging
from webui.service import ConsoleService, LoginSettings
from webui.sessions import DEFAULT_SESSION_HOURS

DEFAULT_LISTEN = "tcp:8080:interface=127.0.0.1"


class Options(usage.Options):
    optParameters = [
        ["zk", None, None, "ZooKeeper connect string host:port[,...][/chroot] (required)"],
        ["listen", None, DEFAULT_LISTEN, "Twisted endpoint of the console"],
        ["lag-sample-interval", None, "30", "seconds between two samples of every group's lag"],
        ["refresh", None, "5", "seconds between two refreshes of an open page (0: never)"],
        ["zk-session-timeout-ms", None, "6000", "ZooKeeper session timeout"],
        ["port-file", None, None, "write the bound port to this file once started (for tests)"],
        ["session-hours", None, str(DEFAULT_SESSION_HOURS), "how long a login lasts"],
        ["session-secret-file", None, None, "sign sessions with this file's bytes (default: a random key "
                                            "per process, so a restart logs everyone out)"],
        ["authorizer-class-name", None, "", "authorizer.class.name: kafka.security.authorizer.AclAuthorizer "
                                            "makes the pages follow the ACLs"],
        ["super-users", None, "", "super.users: User:a;User:b"],
    ]
    optFlags = [["allow-admin-actions", None,
                 "enable the one write action: resetting a stopped group's offsets"],
                ["require-login", None, "ask for a login on loopback too (always beyond it)"],
                ["allow-everyone-if-no-acl-found", None, "allow.everyone.if.no.acl.found=true"]]

    def postOptions(self) -> None:
        if not self["zk"]:
            raise usage.UsageError("--zk is required (the cluster's zk.connect)")
        if self["authorizer-class-name"] and self["authorizer-class-name"] not in ACL_AUTHORIZER_NAMES:
            raise usage.UsageError(f"--authorizer-class-name: must be empty or {ACL_AUTHORIZER_NAMES[0]}")
        if self["session-secret-file"]:
            try:
                with open(self["session-secret-file"], "rb") as file:
                    self["session-secret-file"] = file.read()
            except OSError as exc:
                raise usage.UsageError(f"--session-secret-file: {exc}") from None
            if len(self["session-secret-file"]) < 16:
                raise usage.UsageError("--session-secret-file: at least 16 bytes")
        for option in ("lag-sample-interval", "refresh", "zk-session-timeout-ms", "session-hours"):
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
        port_file=options["port-file"] and os.path.abspath(options["port-file"]),
        login=LoginSettings(require_login=bool(options["require-login"]),
                            session_max_age_s=options["session-hours"] * 3600,
                            session_secret=options["session-secret-file"]),
        authorizer=AclAuthorizer(super_users=parse_super_users(options["super-users"]),
                                 allow_everyone_if_no_acl_found=bool(options["allow-everyone-if-no-acl-found"]))
        if options["authorizer-class-name"] else None)
