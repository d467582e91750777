"""Pure codecs of the Kafka 0.7 wire and storage formats.

Nothing in this package touches sockets, files, clocks, logging or Twisted: it reads
``bytes``/``memoryview`` and returns values plus the next position, so the broker, the clients,
the tools and the tests all share one definition of every layout.
"""
