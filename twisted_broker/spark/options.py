"""The options of the ``twisted_broker`` Spark data source, parsed and checked once.

==================  ==========================================================================
option              meaning
==================  ==========================================================================
zk.connect          ZooKeeper of the cluster, ``host:port[,...][/chroot]``: brokers and
                    partitions from ``/brokers/ids`` and ``/brokers/topics/<topic>`` (spec 5.2),
                    or a replicated topic's from ``/replication/topics/<topic>``
broker.list         or the brokers themselves, ``id:host:port[,...]``; a Metadata request says
                    whether the topic is replicated, else each broker's partition count is
                    probed (a fetch beyond it answers WrongPartition)
topic               the topic (required)
startingOffsets     ``earliest`` (default), ``latest``, or JSON ``{"<broker>-<partition>": offset}``
                    (``{"<partition>": offset}`` for a replicated topic, whatever broker leads);
                    in JSON, -2 means earliest and -1 latest; partitions it does not name start
                    at earliest
endingOffsets       ``latest`` (default: the flushed end when the query is planned) or JSON;
                    -1 means latest. A JSON names exactly the partitions to read
fetch.size          bytes per fetch request (default 1 MiB; a message larger than this fails)
split.size          a broker-partition range larger than this many bytes is read by several
                    Spark partitions, split on message boundaries (default 256 MiB; 0: never)
crc                 ``fail`` (default: a CRC mismatch fails the query), ``mark`` (keep every
                    message; adds the boolean column ``crc_valid``), ``none`` (no check)
decoder             ``none`` (default), ``json`` (one JSON object per payload, fields to
                    columns of the schema given with ``.schema()``), ``text`` (UTF-8 to one
                    string column, ``value`` by default), or ``package.module:function``
decoder.errors      ``fail`` (default) or ``null``: what a payload the decoder rejects becomes
failOnDataLoss      ``true`` (default): a starting offset that retention has deleted fails the
                    query; ``false``: start at the earliest offset still there instead
socket.timeout.ms   per request, for the planner and the executors (default 30000)
failover.timeout.ms a replicated partition: how long an executor goes on trying its replicas
                    when none serves the rest of its range, before it fails the task
                    (default 30000; range_reader.py)
==================  ==========================================================================

Spark hands the options over case-insensitively (keys lower-cased); an option this source does
not know is an error, so a misspelt ``startingOffset`` cannot silently read everything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from twisted_broker.client.broker_partition_info import parse_broker_list
from twisted_broker.client.cluster import partition_name
from twisted_broker.client.consumer_stream import split_partition_name
from twisted_broker.client.replicated_topics import LEADERS
from twisted_broker.errors import InvalidTopic
from twisted_broker.storage.topic_name import check_topic_name

CRC_FAIL, CRC_MARK, CRC_NONE = "fail", "mark", "none"  # message_columns.py says what each does
CRC_MODES = (CRC_FAIL, CRC_MARK, CRC_NONE)
EARLIEST_SPEC, LATEST_SPEC = "earliest", "latest"
# In a JSON offset map, as Spark's Kafka source spells them.
EARLIEST_IN_JSON, LATEST_IN_JSON = -2, -1
DEFAULT_SPARK_FETCH_BYTES = 1 << 20  # 0.7's consumer default is 300 KiB; a bulk load wants fewer round trips
# Each Spark task costs about 0.3 s besides its rows here (launch to first fetch ~0.1 s,
# closing and committing its Parquet file ~0.15 s): a 64 MiB piece (~300,000 messages of
# 200 bytes, ~0.3 s of reading per core) spent as long on that as on its rows. 256 MiB keeps
# it near a fifth and still splits a large partition for a cluster's cores.
DEFAULT_SPLIT_BYTES = 256 << 20
DEFAULT_SOCKET_TIMEOUT_MS = 30000
# Above a ZooKeeper session timeout (6 s by default) plus an election: a range whose end the
# followers' high watermark has not reached yet is served once a new leader is elected.
DEFAULT_FAILOVER_TIMEOUT_MS = 30000
DECODER_NONE, DECODER_JSON, DECODER_TEXT = "none", "json", "text"
DECODER_ERRORS = ("fail", "null")
MAX_FETCH_BYTES = 2**31 - 1  # the fetch request's max size is an int32

_KNOWN = {"zk.connect", "broker.list", "topic", "startingoffsets", "endingoffsets", "fetch.size",
          "split.size", "crc", "decoder", "decoder.errors", "failondataloss", "socket.timeout.ms",
          "failover.timeout.ms"}
_IGNORED = {"path"}  # Spark adds it when load() is given an argument

# An offset spec: "earliest", "latest", or {partition name: offset or -2/-1}.
OffsetSpec = str | dict[str, int]


class OptionError(ValueError):
    """An option is missing, unknown, or has a value this source cannot use."""


@dataclass(frozen=True)
class ReadOptions:
    topic: str
    zk_connect: str | None = None
    brokers: Mapping[int, tuple[str, int]] | None = None  # from broker.list
    starting: OffsetSpec = EARLIEST_SPEC
    ending: OffsetSpec = LATEST_SPEC
    fetch_bytes: int = DEFAULT_SPARK_FETCH_BYTES
    split_bytes: int = DEFAULT_SPLIT_BYTES
    crc: str = CRC_FAIL
    decoder: str = DECODER_NONE
    decoder_errors: str = "fail"
    fail_on_data_loss: bool = True
    socket_timeout_ms: int = DEFAULT_SOCKET_TIMEOUT_MS
    failover_timeout_ms: int = DEFAULT_FAILOVER_TIMEOUT_MS

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "ReadOptions":
        """Check ``options`` (as Spark passes them). Raises OptionError naming the option."""
        given = {key.lower(): str(value) for key, value in options.items()}
        unknown = sorted(set(given) - _KNOWN - _IGNORED)
        if unknown:
            raise OptionError(f"unknown option {', '.join(unknown)}; twisted_broker knows "
                              f"{', '.join(sorted(_KNOWN))}")
        zk_connect, broker_list = given.get("zk.connect"), given.get("broker.list")
        if (zk_connect is None) == (broker_list is None):
            raise OptionError("give exactly one of the options zk.connect and broker.list")
        brokers = None
        if broker_list is not None:
            try:
                brokers = parse_broker_list(broker_list)
            except ValueError as exc:
                raise OptionError(f"broker.list: {exc}") from None
        if "topic" not in given:
            raise OptionError("the option topic is required")
        try:
            topic = check_topic_name(given["topic"])
        except InvalidTopic as exc:
            raise OptionError(f"topic: {exc}") from None
        crc = _choice(given, "crc", CRC_MODES, CRC_FAIL)
        decoder = given.get("decoder", DECODER_NONE)
        if decoder not in (DECODER_NONE, DECODER_JSON, DECODER_TEXT) and ":" not in decoder:
            raise OptionError(f"decoder {decoder!r} is not none, json, text or package.module:function")
        return cls(
            topic=topic, zk_connect=zk_connect, brokers=brokers,
            starting=parse_offset_spec(given.get("startingoffsets", EARLIEST_SPEC), "startingOffsets"),
            ending=parse_offset_spec(given.get("endingoffsets", LATEST_SPEC), "endingOffsets"),
            fetch_bytes=_int(given, "fetch.size", DEFAULT_SPARK_FETCH_BYTES, low=1, high=MAX_FETCH_BYTES),
            split_bytes=_int(given, "split.size", DEFAULT_SPLIT_BYTES, low=0),
            crc=crc, decoder=decoder,
            decoder_errors=_choice(given, "decoder.errors", DECODER_ERRORS, "fail"),
            fail_on_data_loss=_choice(given, "failondataloss", ("true", "false"), "true") == "true",
            socket_timeout_ms=_int(given, "socket.timeout.ms", DEFAULT_SOCKET_TIMEOUT_MS, low=1),
            failover_timeout_ms=_int(given, "failover.timeout.ms", DEFAULT_FAILOVER_TIMEOUT_MS, low=0),
        )

    @property
    def marks_crc(self) -> bool:
        return self.crc == CRC_MARK


def parse_offset_spec(text: str, option: str) -> OffsetSpec:
    """``earliest``, ``latest`` (startingOffsets only has both) or a JSON offset map."""
    words = (EARLIEST_SPEC, LATEST_SPEC) if option == "startingOffsets" else (LATEST_SPEC,)
    stripped = text.strip()
    if stripped.lower() in words:
        return stripped.lower()
    try:
        value = json.loads(stripped)
    except ValueError:
        raise OptionError(f"{option} {text!r} is not {' or '.join(words)} or a JSON object") from None
    if not isinstance(value, dict):
        raise OptionError(f"{option} must be {' or '.join(words)} or a JSON object "
                          '{"<broker>-<partition>": offset} (or {"<partition>": offset}, replicated topics)')
    allowed = (EARLIEST_IN_JSON, LATEST_IN_JSON) if option == "startingOffsets" else (LATEST_IN_JSON,)
    offsets = {}
    for name, offset in value.items():
        try:
            broker, partition = split_partition_name(str(name))
        except ValueError:
            raise OptionError(f"{option}: {name!r} is not a partition name <broker>-<partition> "
                              "(or <partition>, of a replicated topic)") from None
        if isinstance(offset, bool) or not isinstance(offset, int) or (offset < 0 and offset not in allowed):
            raise OptionError(f"{option}: the offset of {name} is {offset!r}, not a byte offset"
                              f"{' (or ' + ', '.join(map(str, allowed)) + ')' if allowed else ''}")
        offsets[partition_name(None if broker == LEADERS else broker, partition)] = offset
    return offsets


def _choice(given: Mapping[str, str], key: str, choices: tuple[str, ...], default: str) -> str:
    value = given.get(key, default).lower()
    if value not in choices:
        raise OptionError(f"{key} {given[key]!r} is not one of {', '.join(choices)}")
    return value


def _int(given: Mapping[str, str], key: str, default: int, *, low: int, high: int | None = None) -> int:
    if key not in given:
        return default
    try:
        value = int(given[key])
    except ValueError:
        raise OptionError(f"{key} {given[key]!r} is not a whole number") from None
    if value < low or (high is not None and value > high):
        raise OptionError(f"{key} {value} is out of range")
    return value
