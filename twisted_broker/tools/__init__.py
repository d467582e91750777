"""The subcommands of ``twisted-broker`` (README.md, "Command line"), one module per subcommand or family.

==================  ===========================================================================
cluster.py          the --zk / --broker-list / --topic / --partition arguments and what they name
zk_default.py       --zk's default (TWISTED_BROKER_ZK, etc/server.properties) and the error naming it
progress.py         the count-and-rate line on a terminal's stderr
table.py            the listing tools' aligned columns
errors.py           CommandError (exit status 1), UsageError (2): one-line failures
produce.py          produce: stdin lines or length-prefixed records to a topic (console producer)
consume.py          consume: a topic's messages to stdout (console consumer)
offsets.py          offsets: earliest, latest or before-time offsets (GetOffsetShell)
topics.py           topics: the registry's topics, partitions per broker
groups.py           groups and reset-offsets (ConsumerOffsetChecker, offset import)
dump_log.py         dump-log: a segment file's messages and their CRCs (DumpLogSegments)
mirror.py           mirror: one cluster's topics into another, wrappers unchanged (MirrorMaker)
==================  ===========================================================================

Each subcommand module has ``HELP``, ``add_arguments(parser)`` and ``run(args) -> exit
status``; cli.py lists them in its table. They use the blocking clients
(twisted_broker.client) and, for ZooKeeper, registry.cluster_view, zk_partition_info and the
ZooKeeper consumer connector (imported inside ``run``: kazoo loads only when used). No
reactor runs in these commands.
"""
