"""bench/small_clients.py's requests decode with the broker's own codecs as what they claim."""

from bench import small_clients as clients
from twisted_broker.codec.kafka.protocol import decode_request
from twisted_broker.codec.kafka.record_batch import batch_values, check_batch
from twisted_broker.codec.kafka07.message_set import iter_messages
from twisted_broker.codec.kafka07.replication import ALL_REQUEST_CLASSES, ProduceAckRequest
from twisted_broker.codec.kafka07.requests import LATEST_TIME, FetchRequest, OffsetRequest, ProduceRequest
from twisted_broker.codec.kafka07.requests import decode_request as decode_07


def _body(request: bytes) -> bytes:
    assert int.from_bytes(request[:4], "big") == len(request) - 4  # the size counts what follows it
    return request[4:]


def test_a_07_produce_carries_one_message_of_the_payload():
    request = decode_07(_body(clients.produce_07("t")))
    assert isinstance(request, ProduceRequest) and (request.topic, request.partition) == ("t", 0)
    assert [bytes(m.payload) for _, _next, m in iter_messages(request.messages)] == [clients.SMALL_PAYLOAD]


def test_offsets_and_fetch_ask_partition_0():
    assert decode_07(_body(clients.offsets_07("t"))) == OffsetRequest("t", 0, LATEST_TIME, 1)
    assert decode_07(_body(clients.fetch_07("t", 210))) == FetchRequest("t", 0, 210, clients.SMALL_FETCH_BYTES)


def test_produce_ack_has_its_acks_and_one_part():
    request = decode_07(_body(clients.produce_ack_07("t", 1)), ALL_REQUEST_CLASSES)
    assert isinstance(request, ProduceAckRequest) and request.required_acks == 1
    [part] = request.produce.produces
    assert (part.topic, part.partition) == ("t", 0)


def test_a_modern_produce_is_v3_with_one_valid_batch_of_one_record():
    request = decode_request(_body(clients.modern_produce("t", -1, correlation_id=7)))
    assert (request.api_key, request.api_version, request.correlation_id) == (0, 3, 7)
    assert request.body["acks"] == -1
    [topic] = request.body["topic_data"]
    [partition] = topic["partition_data"]
    assert (topic["name"], partition["index"]) == ("t", 0)
    header = check_batch(partition["records"])  # raises on a bad CRC
    assert [bytes(v) for v in batch_values(partition["records"], header)] == [clients.SMALL_PAYLOAD]
