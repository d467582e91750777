"""Codecs of the Kafka protocol of today's clients (0.10 to 2.1, non-flexible encodings).

Pure: bytes in, values out, no I/O. They sit beside ``twisted_broker.wire`` (Kafka 0.7's
codecs), which they never change. See docs/kafka-protocol.md.
"""
