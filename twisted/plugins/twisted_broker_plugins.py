"""twistd plugins of twisted_broker: one ServiceMaker per twistd command.

ServiceMaker imports the named module only when its command runs, so listing the
plugins (twistd --help) stays cheap and never imports the broker itself.
"""

from twisted.application.service import ServiceMaker

broker = ServiceMaker("twisted_broker", "twisted_broker.tap", "A Kafka 0.7 broker.", "broker")
webui = ServiceMaker("twisted_broker webui", "webui.tap", "The admin web console of a twisted_broker cluster.",
                     "webui")
