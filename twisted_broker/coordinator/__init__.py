"""Coordinators of today's Kafka clients: consumer groups and producer ids."""
