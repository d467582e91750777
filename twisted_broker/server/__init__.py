"""The broker above the logs: its lifecycle service (the timers of the flush and retention policies) and its figures."""
