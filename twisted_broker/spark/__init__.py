"""Spark integration: the ``twisted_broker`` data source and the nightly ETL (``twisted-broker etl``).

=====================  =======================================================================
module                 holds
=====================  =======================================================================
options                the data source's options, parsed and checked
planning               driver side: partitions from ZooKeeper or broker.list, offsets, splits
message_columns        fetched message sets as Arrow columns (pure, executor side)
range_reader           one planned range read on an executor, fetching ahead of the decoder
decoders               payload decoders: json, text, package.module:function
data_source            the PySpark 4 Python data source (imports pyspark)
session                a local SparkSession set up for this project (interpreter, 127.0.0.1)
checkpoint             the ETL's checkpoint, run manifests, atomic file writes (pure file I/O)
etl                    the ``etl`` subcommand
=====================  =======================================================================

Use (needs the ``spark`` extra: PySpark 4 and pyarrow, and Java 17+)::

    from twisted_broker.spark.session import build_session
    spark = build_session()  # local[*] on 127.0.0.1, workers on this interpreter, source registered
    df = (spark.read.format("twisted_broker").option("zk.connect", "127.0.0.1:2181")
          .option("topic", "events").option("startingOffsets", '{"0-0": 1234}').load())

A session built elsewhere needs ``session.register(spark)``, and ``PYSPARK_PYTHON`` set to an
interpreter that can import this package before it starts (``session.configure_environment``).

Nothing here imports pyspark or pyarrow at import time except ``data_source``,
``message_columns``, ``decoders`` and ``range_reader`` (executor side), so ``etl`` and the
command line's ``--help`` work without the spark extra installed.
"""
