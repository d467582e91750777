"""Producer ids for InitProducerId: handed out from blocks of 1000 that a broker claims at a
time, so ids are unique across the cluster and across restarts.

With ZooKeeper, the last block claimed lives in ``/replication/producer_id_block`` as Kafka
writes it (``{"version":1,"broker":0,"block_start":"0","block_end":"999"}``); a broker claims
the next block by compare-and-set on the node's version, and tries again when another broker
got there first. Without ZooKeeper, ``<log.dir>/producer_ids`` holds the same value and is
replaced atomically before a block's first id is handed out. Ids left in a block when the
broker stops are not reused (Kafka does the same).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass

from twisted.internet.defer import Deferred, fail, inlineCallbacks, succeed

from twisted_broker.codec.kafka import errors
from twisted_broker.registry.zookeeper import (
    UNAVAILABLE_ERRORS, BadVersionError, NodeExistsError, NoNodeError, ZooKeeper,
)
from twisted_broker.registry.replication_paths import ROOT
from twisted_broker.storage.checkpoints import write_atomically

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK = f"{ROOT}/producer_id_block"
PRODUCER_IDS_FILE = "producer_ids"
BLOCK_SIZE = 1000
MAX_CLAIM_ATTEMPTS = 100  # compare-and-set losses in a row before giving up on this request
_LONG_MAX = 2**63 - 1


class ProducerIdsExhausted(Exception):
    """Every producer id (a Java long) was handed out."""


class ClaimRaceLost(Exception):
    """Other brokers won every compare-and-set this claim tried."""


@dataclass(frozen=True)
class ProducerIdBlock:
    broker_id: int
    start: int
    end: int  # inclusive

    def encode(self) -> bytes:
        return json.dumps({"version": 1, "broker": self.broker_id, "block_start": str(self.start),
                           "block_end": str(self.end)}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes) -> ProducerIdBlock:
        """Raises ValueError for anything but a version 1 block with start <= end."""
        try:
            data = json.loads(value.decode("utf-8"))
            block = cls(int(data["broker"]), int(data["block_start"]), int(data["block_end"]))
        except (UnicodeDecodeError, ValueError, KeyError, TypeError):
            raise ValueError(f"producer id block {value[:100]!r} is not readable") from None
        if data.get("version") != 1 or not 0 <= block.start <= block.end:
            raise ValueError(f"producer id block {value[:100]!r} is not a version 1 block")
        return block

    def next(self, broker_id: int) -> ProducerIdBlock:
        if self.end > _LONG_MAX - BLOCK_SIZE:
            raise ProducerIdsExhausted(f"the last producer id block ends at {self.end}")
        return ProducerIdBlock(broker_id, self.end + 1, self.end + BLOCK_SIZE)


FIRST_BLOCK_END = BLOCK_SIZE - 1


def first_block(broker_id: int) -> ProducerIdBlock:
    return ProducerIdBlock(broker_id, 0, FIRST_BLOCK_END)


@dataclass(frozen=True)
class InitProducerIdResult:
    error: int
    producer_id: int = -1
    producer_epoch: int = -1


class _BlockAllocator:
    """Hands out the ids of the current block; ``_claim()`` (a Deferred) gets the next one.
    Requests arriving while a claim runs wait for it: one claim at a time."""

    def __init__(self) -> None:
        self._next_id = 0
        self._end = -1  # no block yet
        self._claiming: list[Deferred] | None = None

    def init_producer_id(self) -> Deferred[InitProducerIdResult]:
        """InitProducerId without a transactional id: a new producer id at epoch 0; error 15
        (COORDINATOR_NOT_AVAILABLE, which clients retry) when no block can be claimed."""
        return self.allocate().addCallbacks(
            lambda producer_id: InitProducerIdResult(errors.NONE, producer_id, 0), self._unavailable)

    @staticmethod
    def _unavailable(failure) -> InitProducerIdResult:
        # ZooKeeper or the disk failing, a node nobody can read, lost races: the client retries
        failure.trap(*UNAVAILABLE_ERRORS, OSError, ValueError, ProducerIdsExhausted, ClaimRaceLost)
        log.warning("no producer id block claimed: %s", failure.getErrorMessage())
        return InitProducerIdResult(errors.COORDINATOR_NOT_AVAILABLE)

    def allocate(self) -> Deferred[int]:
        """The next producer id; fails with the claim's error."""
        if self._next_id <= self._end:
            self._next_id += 1
            return succeed(self._next_id - 1)
        waiter: Deferred[int] = Deferred()
        if self._claiming is not None:
            self._claiming.append(waiter)
            return waiter
        self._claiming = [waiter]
        self._claim().addBoth(self._claimed)
        return waiter

    def _claimed(self, result) -> None:
        waiters, self._claiming = self._claiming or [], None
        if isinstance(result, ProducerIdBlock):
            self._next_id, self._end = result.start, result.end
            log.info("producer ids %d..%d claimed", result.start, result.end)
        for waiter in waiters:
            if isinstance(result, ProducerIdBlock):
                self.allocate().chainDeferred(waiter)
            else:
                waiter.errback(result)

    def _claim(self) -> Deferred[ProducerIdBlock]:
        raise NotImplementedError


class ZooKeeperProducerIds(_BlockAllocator):
    """Blocks claimed in ``/replication/producer_id_block`` by compare-and-set."""

    def __init__(self, zk: ZooKeeper, broker_id: int) -> None:
        super().__init__()
        self._zk, self._broker_id = zk, broker_id

    @inlineCallbacks
    def _claim(self):
        for _ in range(MAX_CLAIM_ATTEMPTS):
            try:
                value, stat = yield self._zk.get(PRODUCER_ID_BLOCK)
            except NoNodeError:
                block = first_block(self._broker_id)
                try:
                    yield self._zk.create(PRODUCER_ID_BLOCK, block.encode())
                except NodeExistsError:
                    continue
                return block
            block = ProducerIdBlock.decode(value).next(self._broker_id)
            try:
                yield self._zk.set(PRODUCER_ID_BLOCK, block.encode(), version=stat.version)
            except BadVersionError:  # another broker claimed a block meanwhile
                continue
            return block
        raise ClaimRaceLost(f"lost {MAX_CLAIM_ATTEMPTS} compare-and-sets on {PRODUCER_ID_BLOCK} in a row")


class FileProducerIds(_BlockAllocator):
    """Blocks claimed in ``<log_dir>/producer_ids`` (a broker without ZooKeeper). Raises
    ValueError at construction if the file is there but unreadable: reusing ids would let
    a new producer's batches pass for an old one's duplicates."""

    def __init__(self, log_dir: str, broker_id: int) -> None:
        super().__init__()
        self.path = os.path.join(log_dir, PRODUCER_IDS_FILE)
        self._broker_id = broker_id
        self._last: ProducerIdBlock | None = None
        try:
            with open(self.path, "rb") as file:
                self._last = ProducerIdBlock.decode(file.read())
        except FileNotFoundError:
            pass
        except ValueError as exc:
            raise ValueError(f"{self.path}: {exc}") from None

    def _claim(self) -> Deferred[ProducerIdBlock]:
        try:
            block = first_block(self._broker_id) if self._last is None else self._last.next(self._broker_id)
            write_atomically(self.path, block.encode())
        except (OSError, ProducerIdsExhausted) as exc:
            return fail(exc)
        self._last = block
        return succeed(block)
