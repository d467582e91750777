"""forward_logging: stdlib records reach twistd's log at their level, under their logger's name,
once however often it is called."""

import logging

from twisted.logger import LogLevel, globalLogPublisher

from twisted_broker.twisted_logging import _ToTwistedLog, forward_logging


def test_records_reach_the_twisted_log_once_at_their_level():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        forward_logging()
        forward_logging()
        logging.getLogger("twisted_broker.example").warning("disk %s is full", "d1")
    finally:
        globalLogPublisher.removeObserver(events.append)
        root.handlers[:] = handlers
        root.setLevel(level)
    forwarded = [event for event in events if event.get("log_namespace") == "twisted_broker.example"]
    assert [(event["log_level"], event["message"]) for event in forwarded] == [(LogLevel.warn, "disk d1 is full")]
    assert not any(isinstance(handler, _ToTwistedLog) for handler in root.handlers)
