"""Parquet writer settings for the loader's columns, used by the ETL and the Spark benchmark.

    df.write.options(**PARQUET_WRITE_OPTIONS).parquet(path)

Spark hands write options to the Parquet writer as Hadoop settings, so ``KEY#column`` applies
to one column (parquet-mr's column settings). Each one here makes the JVM's writer skip work
whose result the loader's columns cannot use; the files hold the same rows and columns, and
any Parquet reader reads them. Measured with ``python -m bench spark`` (1,000,000 rows of
200-byte payloads; the writer's CPU is about 0.9 us per row, most of the JVM's share):

=========================================  ==================================================
option                                     why
=========================================  ==================================================
parquet.enable.dictionary#payload = false  payloads are rarely repeated: the writer would
                                           hash each one into a dictionary page, find it
                                           too large and fall back to plain encoding anyway
parquet.enable.dictionary#offset = false   offsets are unique per message (a wrapper's inner
parquet.enable.dictionary#next_offset      messages share one; still no dictionary pays)
  = false
parquet.column.statistics.enabled#payload  a min/max of opaque payload bytes prunes nothing;
  = false                                  offsets, partitions and topic keep theirs
parquet.size.statistics.enabled = false    byte-size histograms (Parquet 1.15+): no reader
                                           here plans with them
=========================================  ==================================================

Together about 15% less CPU in Spark's task threads, which convert the Arrow batches to rows
and write them (1.07 against 0.92 s per million rows, the same session, variants alternating).
``topic``, ``broker_id`` and ``partition`` keep dictionary encoding: one value per file piece.
Compression stays Spark's ``spark.sql.parquet.compression.codec`` (snappy by default; random
payloads gained nothing from lz4_raw or uncompressed within the noise). Any option given after
these (``.option(...)`` or the ETL's ``--write-option``) overrides them.
"""

from __future__ import annotations

PARQUET_WRITE_OPTIONS = {
    "parquet.enable.dictionary#payload": "false",
    "parquet.enable.dictionary#offset": "false",
    "parquet.enable.dictionary#next_offset": "false",
    "parquet.column.statistics.enabled#payload": "false",
    "parquet.size.statistics.enabled": "false",
}


def write_options(file_format: str, overrides: dict[str, str] | None = None) -> dict[str, str]:
    """The write options for ``file_format``: PARQUET_WRITE_OPTIONS for parquet (none for
    others), then ``overrides`` on top."""
    options = dict(PARQUET_WRITE_OPTIONS) if file_format == "parquet" else {}
    options.update(overrides or {})
    return options
