"""Consumer groups of today's Kafka clients: the membership rules (state.py, pure), the groups of
one coordinator (table.py, pure), and the Twisted service edge with its offset stores."""
