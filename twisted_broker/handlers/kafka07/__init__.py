"""Handlers of Kafka 0.7 requests (and replication's request types on the 0.7 port)."""
