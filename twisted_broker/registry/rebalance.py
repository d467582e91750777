"""Which consumer stream owns which partition: Kafka 0.7.2's range assignment (spec 5.5). Pure.

How this works
--------------
Every consumer of a group runs the same computation on the same ZooKeeper data, so they agree
without talking to each other. For one topic:

1. ``C`` = the stream ("thread") ids of every consumer in the group that subscribes to the
   topic, sorted **as strings** (``g_c10-0 < g_c2-0``);
2. ``P`` = the partition names ``<b>-<p>`` of every broker registered for the topic, sorted
   **as strings** (``"10-0" < "2-0"``, ``"1-10" < "1-2"``);
3. ``q, r = divmod(len(P), len(C))``; the thread at index ``i`` of ``C`` gets the contiguous
   range ``P[i*q + min(i, r)]``, ``q + (1 if i < r else 0)`` long. The first ``r`` threads
   take one extra partition; threads past ``len(P)`` get none.

The string sorts are 0.7's, not a choice: a Python consumer sharing a group with Java ones
must sort the same way or two consumers would claim one partition and leave another unowned.
The paper's variant (``len(P) // len(C)`` each, the remainder unassigned) is not used.

Stream ids come from the registrations (``/consumers/<g>/ids/<id>``): a consumer with ``n``
streams for a topic owns ids ``<consumerId>-0 .. -<n-1>`` for it; a wildcard consumer has ``n``
ids for every topic its filter allows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from twisted_broker.registry.paths import partition_name, thread_id


def partition_range(index: int, threads: int, partitions: int) -> range:
    """Indices into the sorted partitions owned by the thread at ``index`` of ``threads``."""
    if not 0 <= index < threads:
        raise ValueError(f"thread index {index} is not in [0, {threads})")
    per_thread, extra = divmod(partitions, threads)
    start = per_thread * index + min(index, extra)
    return range(start, start + per_thread + (1 if index < extra else 0))


def assign(thread_ids: Iterable[str], partitions: Iterable[str]) -> dict[str, list[str]]:
    """0.7's assignment for one topic: ``{thread id: [partition names]}``, every thread
    present (an empty list when it gets nothing), each list in sorted-string order.

    Both inputs are sorted here as strings. Thread ids are unique (they embed the consumer id,
    a node name); raises ValueError if ``thread_ids`` is empty.
    """
    sorted_threads = sorted(thread_ids)
    if not sorted_threads:
        raise ValueError("no consumer threads to assign partitions to")
    sorted_partitions = sorted(partitions)
    count = len(sorted_partitions)
    return {thread: [sorted_partitions[i] for i in partition_range(index, len(sorted_threads), count)]
            for index, thread in enumerate(sorted_threads)}


def thread_ids_per_topic(consumer_id: str, topic_counts: Mapping[str, int]) -> dict[str, list[str]]:
    """``{topic: [<consumerId>-0, ..., <consumerId>-<n-1>]}`` for a consumer's ``{topic: n}``."""
    return {topic: [thread_id(consumer_id, index) for index in range(count)]
            for topic, count in topic_counts.items()}


def consumers_per_topic(topic_counts_by_consumer: Mapping[str, Mapping[str, int]]) -> dict[str, list[str]]:
    """Every stream id subscribing to each topic, sorted as strings (step 1).

    ``topic_counts_by_consumer`` is ``{consumer id: {topic: streams}}`` with wildcard
    subscriptions already expanded to the topics their filters allow.
    """
    threads: dict[str, list[str]] = {}
    for consumer, topic_counts in topic_counts_by_consumer.items():
        for topic, ids in thread_ids_per_topic(consumer, topic_counts).items():
            threads.setdefault(topic, []).extend(ids)
    return {topic: sorted(ids) for topic, ids in threads.items()}


def partition_names(partition_counts: Mapping[str | int, int]) -> list[str]:
    """``<b>-0 .. <b>-<n-1>`` for each ``/brokers/topics/<t>/<b>`` child and its count,
    sorted as strings (step 2). Broker ids are used as spelled by the node names."""
    return sorted(partition_name(broker, part) for broker, count in partition_counts.items()
                  for part in range(count))


def owned_partitions(my_thread_ids: Mapping[str, Sequence[str]],
                     consumers: Mapping[str, Sequence[str]],
                     partitions: Mapping[str, Sequence[str]]) -> dict[tuple[str, str], str]:
    """The partitions this consumer must own: ``{(topic, partition name): its thread id}``.

    ``my_thread_ids`` is ``{topic: this consumer's stream ids}``, ``consumers`` the output of
    consumers_per_topic, ``partitions`` ``{topic: partition names}`` (a topic no broker holds
    yet may be missing or empty). Raises ValueError if one of this consumer's ids is not among
    the topic's consumers (its registration is not what it believes; 0.7 asserted this).
    """
    decision: dict[tuple[str, str], str] = {}
    for topic, mine in my_thread_ids.items():
        everyone = consumers.get(topic, [])
        missing = [thread for thread in mine if thread not in everyone]
        if missing:
            raise ValueError(f"threads {missing} of topic {topic} are not in the group's registrations")
        assignment = assign(everyone, partitions.get(topic, []))
        for thread in mine:
            for partition in assignment[thread]:
                decision[(topic, partition)] = thread
    return decision
