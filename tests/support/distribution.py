"""How the suite is spread over pytest-xdist's workers (``make test``: ``-n TEST_WORKERS --dist loadgroup``).

Each worker is a pytest session of its own, with its own ZooKeeper (tests/support/zookeeper.py).
Tests are handed out one at a time, except those that share something expensive, which must
run on one worker so that it is made once:

- every test using the ``spark`` fixture (one SparkSession: 10-25 s and ~1.2 GB to start) is in
  the group ``spark``;
- the tests of a module using a fixture of module (or class, package) scope (a broker or a
  cluster per module, for tests that only read it) are in a group of that module.

Slow folders are put first, so that their tests start at once and the unit tests, many and
quick, fill the workers at the end (xdist hands out the groups first, largest first, then the
single tests in collection order).
"""

from __future__ import annotations

import os

import pytest

# The process-level folders, roughly slowest first; anything else (tests/unit) comes after.
FOLDER_ORDER = ("spark", "replication", "reliability", "kafka_clients", "browser", "integration", "coordination")
SHARED_SCOPES = ("module", "class", "package")


def _folder(item: pytest.Item) -> str:
    parts = item.nodeid.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else ""


def _group(item: pytest.Item) -> str | None:
    fixtures = getattr(item, "_fixtureinfo", None)
    if fixtures is None:
        return None
    if "spark" in fixtures.name2fixturedefs:
        return "spark"
    for definitions in fixtures.name2fixturedefs.values():
        if definitions and definitions[-1].scope in SHARED_SCOPES:
            return item.nodeid.split("::")[0]
    return None


def _name_group(item: pytest.Item, group: str) -> None:
    """Give the test the node id ``<id>@<group>``, by which xdist's loadgroup scheduler groups.
    xdist's own hook (3.8) writes that id to ``item._nodeid``, which pytest 9 no longer reads
    (``Node.nodeid`` is ``str(item._id)``), so without this every test would be scheduled
    alone and each worker would start the SparkSession and the module brokers again."""
    if "@" in item.nodeid or not hasattr(item, "_id"):
        return  # an older pytest, where xdist's hook does it
    from _pytest.nodeid import coerce_node_id
    item._id = coerce_node_id(f"{item.nodeid}@{group}")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(FOLDER_ORDER)}
    items.sort(key=lambda item: rank.get(_folder(item), len(FOLDER_ORDER)))  # stable: order kept within
    loadgroup = getattr(config.option, "loadgroup", False)  # set by xdist in its workers
    for item in items:
        group = _group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            if loadgroup and os.environ.get("PYTEST_XDIST_WORKER"):
                _name_group(item, group)
