"""Kafka 0.7 clients on the shared wire codecs: blocking (threads) and Twisted-native.

==========================  ==============================================================
connection.py               BrokerConnection: one blocking socket to one broker
sync_producer.py            SyncProducer: Produce / MultiProduce to one broker
simple_consumer.py          SimpleConsumer: Fetch / MultiFetch / Offsets on one broker
fetched_message_set.py      FetchedMessageSet: what one fetch returned, iterated with offsets
producer.py                 Producer: partition choice, sync or async sending (producer.type)
async_producer.py           AsyncProducer: the bounded queue and its send thread
broker_partition_info.py    BrokerPartitionInfo (the interface) and the static broker.list one
partitioners.py, encoders.py  partitioner.class and serializer.class analogues
class_names.py              resolving those dotted class names
errors.py                   client-side errors (QueueFull, ProducerClosed, ...)
twisted_client.py           TwistedProducer, TwistedSimpleConsumer: the same calls as Deferreds,
                            on network/kafka07_client.py's connection (followers use it too)
==========================  ==============================================================

None of them re-implements a wire layout: requests, responses, message sets and framing all
come from ``twisted_broker.codec.kafka07``. The ZooKeeper-driven parts (broker discovery for the
producer, the consumer group connector) plug in through BrokerPartitionInfo and SimpleConsumer.
"""
