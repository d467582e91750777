"""A Jepsen-style nemesis on real processes: five brokers and a three-node ZooKeeper ensemble in
network namespaces, a seeded random schedule of crashes, pauses, partitions and disk faults
while clients of both protocols produce and consume, and an independent checker at the end
(docs/nemesis.md; the run: run.py)."""
