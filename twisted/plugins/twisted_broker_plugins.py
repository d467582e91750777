"""twistd plugins of twisted_broker: one ServiceMaker per twistd command, and the reactor
``uvloop`` (``twistd -r uvloop``: Twisted's asyncio reactor on uvloop, for issue 24's
measurement; twisted_broker/network/uvloop_reactor.py).

ServiceMaker and Reactor import the named module only when used, so listing the plugins
(twistd --help) stays cheap and never imports the broker itself.
"""

from twisted.application.reactors import Reactor
from twisted.application.service import ServiceMaker

broker = ServiceMaker("twisted_broker", "twisted_broker.tap", "A Kafka 0.7 broker.", "broker")
webui = ServiceMaker("twisted_broker webui", "webui.tap", "The admin web console of a twisted_broker cluster.",
                     "webui")
uvloop = Reactor("uvloop", "twisted_broker.network.uvloop_reactor", "Twisted's asyncio reactor on a uvloop event loop")
