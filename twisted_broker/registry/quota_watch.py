"""Every client-quota entity of the cluster, cached in this broker's ``ClientQuotas`` and kept
current through Kafka's config change notifications (docs/security.md, "Quotas").

1. At each connection (the first, and every one after a loss: notifications may have come and
   gone unseen), ``/config/changes``' children are read with a watch and the highest sequence
   noted; then every entity under ``/config/users`` (and each user's ``clients``) and
   ``/config/clients`` is read, and each quota type's table replaced whole.
2. The watch fires: the children are read again (watch set again); each notification above
   the last one seen names an entity (``entity_path``), whose node is read and set. Others
   (topics, brokers) are skipped. Notifications older than 15 minutes are deleted, as Kafka's
   brokers do.
3. ZooKeeper down, or a read failing: the quotas stay as they were; step 1 runs again when the
   session is back.

Reads are serialised; a watch firing meanwhile marks the work to do again. Reactor thread
only; every call goes through the bridge (registry/zookeeper.py).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from twisted.internet.defer import inlineCallbacks

from twisted_broker.registry.acl_paths import CHANGE_EXPIRY_MS
from twisted_broker.registry.followed_nodes import FollowedNodes
from twisted_broker.registry.quota_config import (
    CONFIG_CLIENTS, config_change_sequence, decode_entity_change, entity_of, entity_path, quota_values,
)
from twisted_broker.registry.user_config import CONFIG_CHANGES, CONFIG_USERS, decode_user_config
from twisted_broker.registry.zookeeper import NodeExistsError, NoNodeError, ZooKeeper
from twisted_broker.security.quota import ClientQuotas, Entity

log = logging.getLogger(__name__)


class QuotaCache(FollowedNodes):
    """Keeps ``quotas`` (one ClientQuotas per quota type) holding the cluster's quota entities.
    ``clock`` ages notifications; ``changes_applied`` counts entities re-read (for tests)."""

    what_is_read = "quotas"

    def __init__(self, zk: ZooKeeper, quotas: Sequence[ClientQuotas], *, clock) -> None:
        super().__init__(zk)
        self.quotas, self.clock = quotas, clock
        self._last_seen = -1
        self.changes_applied = 0

    @inlineCallbacks
    def _load(self):
        children = yield self._changes()
        self._last_seen = max(map(config_change_sequence, children), default=-1)
        entities: list[Entity] = []
        for user_node in (yield self._children(CONFIG_USERS)):
            entities.append(entity_of(f"users/{user_node}"))
            for client_node in (yield self._children(f"{CONFIG_USERS}/{user_node}/clients")):
                entities.append(entity_of(f"users/{user_node}/clients/{client_node}"))
        for client_node in (yield self._children(CONFIG_CLIENTS)):
            entities.append(entity_of(f"clients/{client_node}"))
        configs = []
        for entity in entities:
            configs.append((entity, (yield self._read(entity))))
        for quotas in self.quotas:
            quotas.replace_all(configs)
        log.info("loaded the quotas of %d config entities from ZooKeeper", sum(bool(c) for _, c in configs))

    @inlineCallbacks
    def _follow(self, _what: str = "follow"):
        children = yield self._changes()
        now_ms = self.clock.seconds() * 1000
        for child in sorted(children, key=config_change_sequence):
            sequence = config_change_sequence(child)
            if sequence <= self._last_seen:
                continue
            try:
                data, stat = yield self.zk.get(f"{CONFIG_CHANGES}/{child}")
            except NoNodeError:
                continue
            self._last_seen = sequence
            if now_ms - stat.ctime > CHANGE_EXPIRY_MS:
                self.zk.delete(f"{CONFIG_CHANGES}/{child}").addErrback(lambda _failure: None)  # another's race
            try:
                entity = entity_of(decode_entity_change(data))
            except ValueError:
                continue  # a topic's or a broker's change, or not one we read
            config = yield self._read(entity)
            for quotas in self.quotas:
                quotas.set_entity(entity, config)
            self.changes_applied += 1

    @inlineCallbacks
    def _read(self, entity: Entity):
        path = f"/config/{entity_path(entity)}"
        try:
            value, _stat = yield self.zk.get(path)
        except NoNodeError:
            return {}
        try:
            return quota_values(path, decode_user_config(value))
        except ValueError as exc:
            log.warning("ignoring %s: %s", path, exc)
            return {}

    @inlineCallbacks
    def _children(self, path: str):
        try:
            return (yield self.zk.get_children(path))
        except NoNodeError:
            return []

    @inlineCallbacks
    def _changes(self):
        watch = lambda _event: self._run("follow")  # noqa: E731
        try:
            return (yield self.zk.get_children(CONFIG_CHANGES, watch=watch))
        except NoNodeError:
            pass
        try:  # nobody wrote a change yet: make the path, so that its children can be watched
            yield self.zk.create(CONFIG_CHANGES)
        except NodeExistsError:
            pass
        return (yield self.zk.get_children(CONFIG_CHANGES, watch=watch))
