"""What a console user sees (webui/access.py): the authorizer's decisions over a registry."""

from dataclasses import dataclass, field

from twisted_broker.security.acl import (
    AclEntry, Operation, PatternType, Permission, ResourcePattern, ResourceType,
)
from twisted_broker.security.authorizer import AclAuthorizer
from webui.access import ConsoleAccess, VisibleCluster, visible_snapshot
from webui.cluster_cache import GroupState

READER = "User:reader"


def allow(principal, operation, rtype, name):
    return ResourcePattern(rtype, name, PatternType.LITERAL), AclEntry(principal, "*", operation, Permission.ALLOW)


@dataclass
class Registry:
    """A stand-in ClusterCache: two topics on broker 0, two groups."""
    groups_: dict = field(default_factory=lambda: {
        "g": GroupState("g", offsets={"shown": {"0-0": 1}, "hidden": {"0-0": 2}}),
        "secret": GroupState("secret", offsets={"shown": {"0-0": 3}})})
    zk_connect: str = "zk"

    def topics(self): return ["hidden", "shown"]
    def all_topics(self): return self.topics()
    def topic_brokers(self, topic): return {0: 1}
    def broker_topics(self, broker_id): return {"hidden": 1, "shown": 1}
    def groups(self): return sorted(self.groups_)
    def group(self, name): return self.groups_.get(name)


def authorizer(*acls) -> AclAuthorizer:
    authorizer = AclAuthorizer(super_users=["User:root"])
    authorizer.load({pattern: [entry] for pattern, entry in acls})
    return authorizer


def test_a_reader_sees_only_what_it_may_describe_and_may_not_alter():
    acls = authorizer(allow(READER, Operation.DESCRIBE, ResourceType.TOPIC, "shown"),
                      allow(READER, Operation.READ, ResourceType.GROUP, "g"))  # Read implies Describe
    access = ConsoleAccess(acls, READER, "10.0.0.1")
    cluster = VisibleCluster(Registry(), access)
    assert cluster.topics() == ["shown"] and cluster.broker_topics(0) == {"shown": 1}
    assert cluster.groups() == ["g"] and cluster.group("secret") is None
    assert cluster.group("g").topics == ["shown"]  # the group's offsets of undescribed topics left out
    assert cluster.topic_brokers("hidden") == {} and cluster.partition_count() == 1
    assert cluster.zk_connect == "zk"  # the rest as it is
    assert not access.may_alter_group("g") and not access.may_describe_cluster()
    snapshot = {"topics": {"hidden": 1, "shown": 2}, "logs": [{"topic": "hidden"}, {"topic": "shown"}]}
    assert visible_snapshot(snapshot, access) == {"topics": {"shown": 2}, "logs": [{"topic": "shown"}]}


def test_super_users_no_login_and_no_authorizer_see_everything():
    acls = authorizer()
    for access in (ConsoleAccess(acls, "User:root", "h"), ConsoleAccess(acls, None, "h"), ConsoleAccess(None, READER, "h")):
        assert access.everything and access.may_alter_group("secret") and access.may_describe_cluster()
    assert not ConsoleAccess(acls, READER, "h").may_describe_topic("shown")  # no ACL: closed by default
