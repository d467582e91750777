"""Every user's SCRAM credentials, cached on the broker and kept current by ZooKeeper watches.

A login looks its user up here and never waits for ZooKeeper (security/sasl.py is
synchronous). The cache watches ``/config/users``' children (users added or deleted) and each
user's node (credentials changed); kazoo's watches reach the reactor through the bridge
(zookeeper.py), and so does every read. A new session has lost its watches: everything is read
again. Reactor thread only.
"""

from __future__ import annotations

import logging

from twisted.application.service import Service
from twisted.internet.defer import inlineCallbacks

from twisted_broker.registry.user_config import (
    CONFIG_USERS, decode_user_config, desanitize_user, scram_credentials, user_path,
)
from twisted_broker.registry.zookeeper import CONNECTED, UNAVAILABLE_ERRORS, NoNodeError
from twisted_broker.security.scram import ScramCredential

log = logging.getLogger(__name__)


class UserCredentials(Service):
    """``lookup(mechanism, user)``: the user's stored credential, or None. Reads and watches
    from ``startService`` on."""

    def __init__(self, zk) -> None:
        self._zk = zk
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self._watched: set[str] = set()  # user nodes with a data watch set
        self.loaded = False  # the users' list has been read once

    def startService(self) -> None:
        super().startService()
        self._zk.add_state_listener(self._on_state)
        self._read_users()

    def lookup(self, mechanism: str, user: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def _on_state(self, state) -> None:
        if state == CONNECTED:
            self._watched.clear()  # a new session: the old watches may be gone
            self._read_users()

    @inlineCallbacks
    def _read_users(self):
        try:
            nodes = yield self._zk.get_children(CONFIG_USERS, watch=lambda event: self._read_users())
        except NoNodeError:
            # No user yet: learn when the first one's parent appears.
            try:
                exists = yield self._zk.exists(CONFIG_USERS, watch=lambda event: self._read_users())
            except UNAVAILABLE_ERRORS as exc:
                log.warning("watching %s failed: %r", CONFIG_USERS, exc)
                return
            if exists is not None:
                self._read_users()
            self._users.clear()
            self.loaded = True
            return
        except UNAVAILABLE_ERRORS as exc:  # kept as they were; the next session reads again
            log.warning("reading %s failed: %r", CONFIG_USERS, exc)
            return
        names = {desanitize_user(node) for node in nodes}
        for gone in set(self._users) - names:
            self._users.pop(gone, None)
        for name in names - self._watched:
            self._watched.add(name)
            self._read_user(name)
        self.loaded = True

    @inlineCallbacks
    def _read_user(self, name: str):
        path = user_path(name)
        try:
            value, _stat = yield self._zk.get(path, watch=lambda event: self._read_user(name))
        except NoNodeError:
            self._users.pop(name, None)
            self._watched.discard(name)
            return
        except UNAVAILABLE_ERRORS as exc:
            self._watched.discard(name)
            log.warning("reading %s failed: %r", path, exc)
            return
        try:
            self._users[name] = scram_credentials(name, decode_user_config(value))
        except ValueError as exc:
            log.warning("ignoring %s: %s", path, exc)
            self._users.pop(name, None)
