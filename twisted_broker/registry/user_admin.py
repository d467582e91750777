"""Blocking reads and writes of users' SCRAM credentials for the ``users`` tool.

A write is a read-modify-write guarded by the node's version: the tool changes only the keys
it owns (the SCRAM mechanisms) and keeps the rest of the user's config (quotas), and a writer
that raced it makes it read again. After each change, Kafka's change notification
(user_config.py), so that Kafka's own brokers sharing this ZooKeeper would see it too.
"""

from __future__ import annotations

from collections.abc import Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from twisted_broker.registry.cluster_view import ClusterView
from twisted_broker.registry.user_config import (
    CONFIG_CHANGE_PREFIX, CONFIG_USERS, decode_user_config, desanitize_user, encode_entity_change,
    encode_user_config, sanitize_user,
)

ATTEMPTS = 10  # read-modify-write rounds before a tool gives up on a node others keep changing


class UserAdmin(ClusterView):
    """The registry's users, for a tool: ``users()``, ``user_config(name)``, ``change_user(...)``;
    and any config entity's node by its path under /config (``entity_config``, ``change_config``:
    the quotas tool's, registry/quota_config.py)."""

    def users(self) -> list[str]:
        return sorted(desanitize_user(node) for node in self._children(CONFIG_USERS))

    def user_config(self, name: str) -> dict[str, str]:
        """The user's config map ({} for no such user). Raises ValueError for a bad node."""
        return self.entity_config(f"users/{sanitize_user(name)}")

    def entity_config(self, entity_path: str) -> dict[str, str]:
        """The config map of ``/config/<entity_path>`` ({} for no node). Raises ValueError."""
        return decode_user_config(self._data(f"/config/{entity_path}"))

    def config_children(self, path: str) -> list[str]:
        """The children of ``/config/<path>`` (``users``, ``users/alice/clients``); [] for none."""
        return self._children(f"/config/{path}")

    def change_user(self, name: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """Apply ``change`` (old config -> new config) to the user's node, creating it if needed;
        an empty result leaves an empty config (Kafka keeps the node). Returns the new config."""
        return self.change_config(f"users/{sanitize_user(name)}", change)

    def change_config(self, entity_path: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """``change_user`` for any entity, ``/config/<entity_path>`` (``clients/app``...)."""
        path = f"/config/{entity_path}"

        def write() -> dict[str, str]:
            for _ in range(ATTEMPTS):
                try:
                    value, stat = self._client.get(path)
                except NoNodeError:
                    new = change({})
                    try:
                        self._client.create(path, encode_user_config(new), makepath=True)
                    except NodeExistsError:
                        continue  # created meanwhile: read it
                else:
                    new = change(decode_user_config(value))
                    try:
                        self._client.set(path, encode_user_config(new), version=stat.version)
                    except (BadVersionError, NoNodeError):
                        continue  # changed meanwhile: read it again
                self._client.create(CONFIG_CHANGE_PREFIX, encode_entity_change(entity_path), sequence=True,
                                    makepath=True)
                return new
            raise ConnectionError(f"{path} kept changing under {ATTEMPTS} attempts to write it")

        return self._call(write)
