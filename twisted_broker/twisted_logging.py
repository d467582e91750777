"""forward_logging: stdlib logging, which the project uses throughout, into twistd's log.

Both twistd plugins (twisted_broker/tap.py and webui/tap.py) call it; it lives below both so
that neither composition root imports the other.
"""

from __future__ import annotations

import logging

from twisted.logger import Logger, LogLevel

_LEVELS = {logging.DEBUG: LogLevel.debug, logging.INFO: LogLevel.info, logging.WARNING: LogLevel.warn,
           logging.ERROR: LogLevel.error, logging.CRITICAL: LogLevel.critical}


class _ToTwistedLog(logging.Handler):
    """Forwards each stdlib record to twistd's log, at the same level, under the logger's name."""

    def emit(self, record: logging.LogRecord) -> None:
        Logger(namespace=record.name).emit(_LEVELS.get(record.levelno, LogLevel.info), "{message}",
                                           message=self.format(record))


def forward_logging() -> None:
    """Send INFO and up of every stdlib logger to twistd's log; calling it again adds nothing."""
    root = logging.getLogger()
    if not any(isinstance(handler, _ToTwistedLog) for handler in root.handlers):
        root.addHandler(_ToTwistedLog())
    root.setLevel(logging.INFO)
