"""Codecs of the Kafka protocol of today's clients (0.10 to 2.1, non-flexible encodings).

Pure: bytes in, values out, no I/O. They sit beside ``twisted_broker.codec.kafka07`` (Kafka 0.7's
codecs), which they never change. See docs/kafka-protocol.md.

- primitives.py: field types (ints, varints, strings, bytes, arrays; Gap for record sets)
- schema.py: Schema, the declarative field tables, and the one walker that codes them
- api_keys.py: API keys and ``SUPPORTED`` versions; errors.py: Kafka's error codes
- cluster_schemas.py, log_schemas.py, group_schemas.py: each API's tables per version
- protocol.py: request/response frames (headers, decode_request, encode_response[_chunks])
- batch_header.py, record_batch.py, record_compression.py: record batches (magic 2)
- consumer_protocol.py: the "consumer" protocol's subscription and assignment
"""
