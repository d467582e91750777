"""What the test folders share: the one place for helpers (no folder imports another's
conftest or test modules). tests/conftest.py registers the shared fixtures defined here.

Processes and their clients
    brokers.py            BrokerProcess (``twistd -n broker``), raw-socket clients (WireClient,
                          DebugSession); fixtures broker_factory, broker
    zookeeper.py          one ZooKeeper per session (per xdist worker), new_chroot; fixtures
                          zookeeper, zk_connect, zk
    replicated_cluster.py three brokers with replication (ReplicatedCluster, Wire) and what tests
                          ask of them; fixtures replicated_cluster, three_brokers
    modern_listener.py    a broker with the modern listener, kafka-python's admin client
    console_process.py    the admin console (``twistd -n webui``) and plain HTTP to it
    webui_cluster.py      the cluster the console tests read (a fixture per module)
    scale_registry.py     1,000 replicated topics' registry written straight into ZooKeeper
                          (the console's and the CLI's scale test, bench/console_scale.py)
    cli.py                ``python -m twisted_broker`` as a process
    consumer_groups.py    the 0.7 consumer group tests' producers, collectors and connectors
    consumer_group_member.py  a group member in a process of its own (a script)
    spark_topics.py       data for the Spark tests and its reference reading
    string_peer.py        a listener's connection on a StringTransport (unit tests)
    manual_flusher.py     a log flusher whose jobs run when the test runs them (unit tests)
    tls.py                a self-signed certificate; fixture certificate
Encodings and waiting
    spec_encoding.py      Kafka 0.7 requests written from the spec, not the broker's codecs
    polling.py            waiting with a deadline instead of sleeping
Kafka clients (kafka_clients/)
    modern_cluster.py     ModernBroker, ModernCluster: brokers whose modern listener clients use
    client_*.py, js/      kafka-python, aiokafka, confluent-kafka, kafkajs, kcat as adapters
    kafka_frames.py, fuzz_modern.py, records.py   raw frames, the modern fuzzer, sample records
Faults (faults/)
    fuzz_frames.py, load.py, wire_load.py, oracle.py   the 0.7 fuzzer, load, and the log oracle
    tcp_proxy.py, ensemble.py, traffic.py, group_member.py   a blackhole proxy, a ZooKeeper
                          ensemble, replication's load, a group member process
Run-wide
    reliability.py        RELIABILITY_SCALE and the summary table printed at the end
    distribution.py       how the suite is spread over pytest-xdist's workers
"""
