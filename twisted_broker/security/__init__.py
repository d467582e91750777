"""Security's pure rules (issue 25, docs/security.md): listeners and their security protocols,
SCRAM credentials, the SASL exchange as a state machine, principals from certificates; Kafka's
ACL model and the authorizer that applies it. No sockets, no Twisted, no ZooKeeper: the
network, handlers and registry feed them."""
