"""Handlers of the Kafka protocol of today's clients, one module per API family."""
