"""The partition log on disk: segment files, recovery, retention and the broker's set of logs.

This package does file I/O but imports nothing from Twisted and starts no timers: it is told the
time through a ``now`` callable, and the broker's timer services ask it to flush what is due
and delete what has expired.
"""
