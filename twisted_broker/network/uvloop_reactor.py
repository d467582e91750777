"""``twistd -r uvloop``: Twisted's asyncio reactor running on a uvloop event loop.

Issue 24 asks for a faster event loop to be measured against the epoll reactor (the default)
in one run, and adopted only if it wins there. This module is what ``-r uvloop`` installs
(the reactor plugin in twisted/plugins/twisted_broker_plugins.py); ``python -m bench small``
measures the two side by side (``BENCH_REACTOR=uvloop``). uvloop comes with the ``test`` extra.
The transports are Twisted's own either way (``AsyncioSelectorReactor`` is a
``PosixReactorBase``): only the loop that waits for readiness and runs the timers changes.
"""

from __future__ import annotations


def install() -> None:
    import asyncio

    try:
        import uvloop
    except ImportError:
        raise SystemExit("twistd -r uvloop: the module uvloop is not installed (pip install uvloop)") from None
    from twisted.internet import asyncioreactor

    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    asyncioreactor.install(loop)
