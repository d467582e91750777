"""ZooKeeper: Kafka 0.7's paths and values (pure), the kazoo bridge to Twisted, registrations."""
