"""The broker above the logs: request dispatch, statistics, and the timers of the flush and retention policies."""
