"""``quotas``: client quotas in ZooKeeper, in the manner of Kafka's ``kafka-configs
--entity-type users|clients --alter --add-config 'producer_byte_rate=1048576'``
(docs/security.md, "Quotas").

``--entity-type users`` / ``clients`` (both, users first, for a user's client id), each
followed by ``--entity-name NAME`` or ``--entity-default``; then ``--add-config
k=v[,k=v]``, ``--delete-config k[,k]`` or ``--describe`` (without a name: every entity of
that type). Writes keep the node's other keys (a user's SCRAM credentials) and add Kafka's
change notification (registry/user_admin.py).
"""

from __future__ import annotations

import argparse

from twisted_broker.security.quota import DEFAULT, QUOTA_KEYS, Entity, parse_rate
from twisted_broker.tools import cluster
from twisted_broker.tools.errors import UsageError

HELP = "add, delete or describe client quotas (producer_byte_rate, consumer_byte_rate) of users and client ids"
ENTITY_TYPES = ("users", "clients")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cluster.add_cluster_arguments(parser, allow_broker_list=False)
    parser.add_argument("--entity-type", action="append", choices=ENTITY_TYPES, dest="entity_types", default=[],
                        help="users or clients; both (users first) for a user's client id")
    parser.add_argument("--entity-name", action="append", dest="entity_names", metavar="NAME",
                        help="the user or client id, in the order of --entity-type")
    parser.add_argument("--entity-default", action="append_const", dest="entity_names", const=DEFAULT,
                        help="the default user or client id (<default>), in place of a name")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--add-config", metavar="K=V[,K=V]", help=f"set quotas: {', '.join(QUOTA_KEYS)}")
    action.add_argument("--delete-config", metavar="K[,K]", help="remove quotas")
    action.add_argument("--describe", action="store_true", help="print the quotas set")


def parse_add_config(text: str) -> dict[str, str]:
    """``producer_byte_rate=1024,consumer_byte_rate=2048`` -> {key: value}. Raises UsageError."""
    found = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or key not in QUOTA_KEYS:
            raise UsageError(f"--add-config {item!r}: want KEY=VALUE with KEY one of {', '.join(QUOTA_KEYS)}")
        if not value.isdigit():
            raise UsageError(f"--add-config {item!r}: a quota is a whole number of bytes per second")
        try:
            parse_rate(value)
        except ValueError as exc:
            raise UsageError(f"--add-config {exc}") from None
        found[key] = value
    if not found:
        raise UsageError("--add-config: no KEY=VALUE given")
    return found


def entity_from(types: list[str], names: list[str] | None) -> Entity | None:
    """The entity the options name; None for a --describe of every entity of one type.
    Raises UsageError."""
    names = names or []
    if types not in (["users"], ["clients"], ["users", "clients"]):
        raise UsageError("--entity-type: users, clients, or users then clients")
    if len(names) > len(types) or (len(names) < len(types) and len(types) == 2):
        raise UsageError("give one --entity-name or --entity-default per --entity-type")
    if not names:
        return None
    if any(not name for name in names):
        raise UsageError("--entity-name: the name is empty")
    if types == ["clients"]:
        return None, names[0]
    return names[0], names[1] if len(names) == 2 else None


def describe_line(entity: Entity, config: dict[str, str]) -> str:
    """Kafka's ``Configs for user-principal 'alice', client-id 'app' are k=v,...``."""
    user, client_id = entity
    who = ", ".join([*([f"user-principal '{user}'"] if user is not None else []),
                     *([f"client-id '{client_id}'"] if client_id is not None else [])])
    return f"Configs for {who} are " + ",".join(f"{k}={config[k]}" for k in QUOTA_KEYS if k in config)


def run(args: argparse.Namespace) -> int:
    entity = entity_from(args.entity_types, args.entity_names)
    if entity is None and not args.describe:
        raise UsageError("--add-config and --delete-config need --entity-name or --entity-default")
    add = parse_add_config(args.add_config) if args.add_config is not None else {}
    drop = {key.strip() for key in (args.delete_config or "").split(",") if key.strip()}
    if args.delete_config is not None and (not drop or drop - set(QUOTA_KEYS)):
        raise UsageError(f"--delete-config: keys among {', '.join(QUOTA_KEYS)}")
    from twisted_broker.registry.quota_config import entity_path  # kazoo loads only when used
    from twisted_broker.registry.user_admin import UserAdmin
    with UserAdmin(args.zk, timeout_s=cluster.ZK_TIMEOUT_S) as admin:
        if args.describe:
            for found in [entity] if entity is not None else _entities(admin, args.entity_types[0]):
                try:
                    config = admin.entity_config(entity_path(found))
                except ValueError as exc:
                    print(f"{describe_line(found, {})}(unreadable: {exc})")
                    continue
                if any(key in config for key in QUOTA_KEYS) or entity is not None:
                    print(describe_line(found, config))
            return 0
        path = entity_path(entity)
        if add:
            admin.change_config(path, lambda config: {**config, **add})
            print(f"Completed updating config for entity {path}.")
        else:
            admin.change_config(path, lambda config: {k: v for k, v in config.items() if k not in drop})
            print(f"Completed deleting {', '.join(sorted(drop))} of entity {path}.")
        return 0


def _entities(admin, entity_type: str) -> list[Entity]:
    from twisted_broker.registry.quota_config import entity_of
    found = []
    for node in admin.config_children(entity_type):
        found.append(entity_of(f"{entity_type}/{node}"))
        if entity_type == "users":
            found += [entity_of(f"users/{node}/clients/{client}")
                      for client in admin.config_children(f"users/{node}/clients")]
    return found
