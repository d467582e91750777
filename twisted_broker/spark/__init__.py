"""Spark integration: the ``twisted_broker`` data source and the nightly ETL (``twisted-broker etl``).

=====================  =======================================================================
module                 holds
=====================  =======================================================================
options                the data source's options, parsed and checked
planning               driver side: partitions (0.7 or replicated) from ZooKeeper or broker.list,
                       offsets, splits
splits                 a planned range (OffsetRange) and its cutting at message starts
message_columns        fetched message sets as Arrow columns (pure, executor side)
range_reader           one planned range read on an executor, fetching ahead of the decoder;
                       a replicated one from the next replica when one stops
decoders               payload decoders: json, text, package.module:function
data_source            the PySpark 4 Python data source (imports pyspark)
session                a SparkSession set up for this project (workers' Python, 127.0.0.1)
executor_code          which Python the workers run, and this package zipped for them (pyFiles)
standalone             a standalone master and workers on loopback (``make spark-cluster``)
checkpoint             the ETL's checkpoint, run manifests, atomic file writes (pure file I/O)
etl_run                one ETL run: recover, plan, write, verify, publish, commit
spark_jobs             a Spark failure as one line, a progress line while a job runs
etl                    the ``etl`` subcommand: options, the session, the summary table
=====================  =======================================================================

Use (needs the ``spark`` extra: PySpark 4 and pyarrow, and Java 17+)::

    from twisted_broker.spark.session import build_session
    spark = build_session()  # local[*] on 127.0.0.1, workers on this interpreter, source registered
    df = (spark.read.format("twisted_broker").option("zk.connect", "127.0.0.1:2181")
          .option("topic", "events").option("startingOffsets", '{"0-0": 1234}').load())

A session built elsewhere needs ``session.register(spark)``, which also ships this package to
workers whose Python is not this interpreter; theirs needs pyspark and pyarrow only.

Nothing here imports pyspark or pyarrow at import time except ``data_source``,
``message_columns``, ``decoders`` and ``range_reader`` (executor side), so ``etl`` and the
command line's ``--help`` work without the spark extra installed.
"""
