"""The ``twisted_broker`` data source for ``spark.read`` (PySpark 4's Python Data Source API).

    spark.read.format("twisted_broker").option("zk.connect", "127.0.0.1:2181")
         .option("topic", "events").load()

Options: options.py. Columns (the default schema):

==============  =========  ==============================================================
column          type       value
==============  =========  ==============================================================
topic           string     the topic
broker_id       int        the broker holding the partition; null for a replicated topic,
                           whose partition is the same bytes on every replica
partition       int        the partition on that broker (a replicated topic's: 0..N-1)
offset          bigint     the message's byte offset in the partition log; a compressed
                           wrapper's inner messages all report the wrapper's offset
next_offset     bigint     where a consumer resumes after this message (spec 3.5): the
                           wrapper's offset for every inner message but the last
payload         binary     the message payload
crc_valid       boolean    only with ``crc=mark``: the payload matches its CRC
==============  =========  ==============================================================

Rows of one partition arrive in log order. A partition is identified by ``(broker_id,
partition)`` for a 0.7 topic and by ``partition`` alone for a replicated topic (planning.py
says why): a read after a leader change names and numbers its rows as before. A schema
given with ``.schema(...)`` may name any of these columns (``broker_id`` and ``partition``
may be bigint) plus columns a decoder fills.

Where the work happens: Spark runs ``schema()`` and ``reader()``/``partitions()`` in Python
workers on the driver, which plan with planning.py (ZooKeeper, Offsets requests, split
probes); it pickles the reader and one ``BrokerRange`` per piece to the executors, whose
``read`` pulls the piece with a SimpleConsumer in ``fetch.size`` chunks and yields one Arrow
RecordBatch per ``BATCH_BYTES`` of fetched messages (several fetches, concatenated). A piece
of a replicated partition carries its replicas, leader first, and is read from the next one
at the offset reached when one stops answering (range_reader.read_replicas). The classes are
pickled by reference: executors import this package.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from twisted_broker.client.cluster import partition_name
from twisted_broker.spark import planning
from twisted_broker.spark.decoders import make_decoder
from twisted_broker.spark.message_columns import MessageColumns
from twisted_broker.spark.options import CRC_MARK, DECODER_NONE, DECODER_TEXT, OptionError, ReadOptions
from twisted_broker.spark.range_reader import ReplicaAddress, read_range, read_replicas

NAME = "twisted_broker"
# Fetches (1 MiB by default, ~5,000 rows of 200 bytes) are concatenated into RecordBatches of
# about this many message bytes: fewer, larger batches for the JVM to load (its writer CPU
# fell from 0.98 to 0.90 s per million rows against one batch per fetch); past ~32 MB it
# rose again (less overlap between the Python worker and the JVM, larger buffers).
BATCH_BYTES = 8 << 20
SOURCE_COLUMNS = {  # name -> the Spark types it may have
    "topic": ("string",), "broker_id": ("int", "bigint"), "partition": ("int", "bigint"),
    "offset": ("bigint",), "next_offset": ("bigint",), "payload": ("binary",), "crc_valid": ("boolean",),
}
DEFAULT_COLUMNS = ("topic STRING, broker_id INT, partition INT, offset BIGINT, next_offset BIGINT, "
                   "payload BINARY")


class BrokerRange(InputPartition):
    """One piece of a read: log offsets ``[start, end)`` of one broker-partition, or of a
    replicated partition (``broker_id`` None) held by ``replicas``, in the order to ask them."""

    def __init__(self, topic: str, broker_id: int | None, partition: int, host: str, port: int,
                 start: int, end: int, replicas: tuple[ReplicaAddress, ...] = ()) -> None:
        super().__init__(f"{partition_name(broker_id, partition)}:{start}-{end}")
        self.topic, self.broker_id, self.partition = topic, broker_id, partition
        self.host, self.port, self.start, self.end = host, port, start, end
        self.replicas = replicas

    def __repr__(self) -> str:
        return f"BrokerRange({self.topic} {partition_name(self.broker_id, self.partition)} [{self.start}, {self.end}))"


class TwistedBrokerDataSource(DataSource):
    """``spark.read.format("twisted_broker")``: a Kafka 0.7 topic as a batch DataFrame."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        options = ReadOptions.parse(self.options)
        columns = DEFAULT_COLUMNS
        if options.crc == CRC_MARK:
            columns += ", crc_valid BOOLEAN"
        if options.decoder == DECODER_TEXT:
            return columns + ", value STRING"
        if options.decoder != DECODER_NONE:
            raise OptionError(f"decoder {options.decoder} needs the columns to fill: give them with "
                              ".schema(...), beside any of the source's own columns")
        return columns

    def reader(self, schema: StructType) -> "TwistedBrokerReader":
        return TwistedBrokerReader(ReadOptions.parse(self.options), schema)


class TwistedBrokerReader(DataSourceReader):
    """Plans on the driver (``partitions``); reads one BrokerRange on an executor (``read``)."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        decoded = []
        for field in schema.fields:
            allowed = SOURCE_COLUMNS.get(field.name)
            if allowed is None:
                decoded.append(field.name)
            elif field.dataType.simpleString() not in allowed:
                raise OptionError(f"column {field.name} of twisted_broker is {' or '.join(allowed)}, "
                                  f"not {field.dataType.simpleString()}")
        if "crc_valid" in schema.fieldNames() and options.crc != CRC_MARK:
            raise OptionError("the column crc_valid needs the option crc=mark")
        self.decoded_schema = pa.schema([self.arrow_schema.field(name) for name in decoded])
        make_decoder(options.decoder, self.decoded_schema, options.decoder_errors)  # fail here, not on executors

    def partitions(self) -> list[BrokerRange]:
        topic = self.options.topic
        pieces = []
        for piece in planning.plan_read(self.options):
            target = piece.target
            replicas = () if target.broker_id is not None else tuple(
                (replica.broker_id, replica.host, replica.port) for replica in target.replicas)
            pieces.append(BrokerRange(topic, target.broker_id, target.partition, target.host, target.port,
                                      piece.start, piece.end, replicas))
        return pieces

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, BrokerRange):
            return  # Spark's placeholder when the plan has no pieces
        decoder = make_decoder(self.options.decoder, self.decoded_schema, self.options.decoder_errors)
        pending: list[MessageColumns] = []
        pending_bytes = 0
        options = self.options
        if partition.replicas:
            fetched = read_replicas(partition.topic, partition.partition, partition.replicas, partition.start,
                                    partition.end, fetch_bytes=options.fetch_bytes, crc=options.crc,
                                    socket_timeout_ms=options.socket_timeout_ms,
                                    failover_timeout_ms=options.failover_timeout_ms)
        else:
            fetched = read_range(partition.topic, partition.broker_id, partition.partition, partition.host,
                                 partition.port, partition.start, partition.end, fetch_bytes=options.fetch_bytes,
                                 crc=options.crc, socket_timeout_ms=options.socket_timeout_ms)
        for columns in fetched:
            pending.append(columns)
            pending_bytes += columns.valid_bytes
            if pending_bytes >= BATCH_BYTES:
                yield self._batch(partition, MessageColumns.concat(pending), decoder)
                pending, pending_bytes = [], 0
        if pending:
            yield self._batch(partition, MessageColumns.concat(pending), decoder)

    def _batch(self, piece: BrokerRange, columns: MessageColumns, decoder) -> pa.RecordBatch:
        count = columns.num_rows
        decoded = decoder(columns.payload, columns.offset) if decoder is not None else None
        arrays = []
        for field in self.arrow_schema:
            name = field.name
            if name == "topic":
                array = pa.repeat(pa.scalar(piece.topic, field.type), count)
            elif name == "broker_id":  # null for a replicated partition: no one broker holds it
                array = pa.repeat(pa.scalar(piece.broker_id, field.type), count)
            elif name == "partition":
                array = pa.repeat(pa.scalar(piece.partition, field.type), count)
            elif name in ("offset", "next_offset", "payload", "crc_valid"):
                array = getattr(columns, name)
            else:
                array = decoded.column(name)
            arrays.append(array)
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)
