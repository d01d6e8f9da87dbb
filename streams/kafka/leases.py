"""A fleet-unique Snowflake worker ID, leased through the Kafka cluster itself.

:class:`WorkerIdLease` gives one producer a worker ID no other live producer of the
fleet holds, with no configuration, no ZooKeeper and no database. The rules are
:mod:`streams.core.ids.lease`'s; this module reads and writes the log they run on:
the single-partition leases topic (``streams.id-leases`` by default, created on first
use with ``message.timestamp.type=LogAppendTime``, so the broker's clock stamps every
claim and renewal).

Acquiring (:meth:`WorkerIdLease.acquire`), at start:

1. read the leases topic to its end and replay it into a :class:`LeaseTable`;
2. pick a free worker ID at random (or take the configured one, if it is free);
3. write a hold for it, wait for the acknowledgement;
4. read the topic up to that hold and replay: the hold took effect only if no other
   producer's hold for the same ID came first. If one did, go back to 2;
5. wait until the local clock is past the previous holder's last possible ID time
   (only for an ID that was held before), then mint.

Costs at start: one metadata request (and a topic creation the first time), one read
of the leases topic (a few thousand small records at most: renewals of the last hour),
one acknowledged write and one more short read: about 0.17 s on a local cluster
(0.8 s the first time). Renewing costs one small record every ``renew_every_ms`` (10 s by default).

While running, a daemon thread renews the hold every ``renew_every_ms`` and follows
the topic. The lease is good until ``lease_ms`` after the moment *before* the last
acknowledged hold was sent (the local monotonic clock), so the producer stops no
later than the fleet thinks it does. If renewals fail (the cluster is unreachable,
or refuses the write) the lease lapses and :meth:`check` raises
:class:`~streams.core.errors.WorkerIdLeaseError`; the thread keeps trying to acquire
a lease again, after which minting resumes (possibly under another worker ID). A
hold by someone else on our worker ID that takes effect (only possible with clock
skew beyond what ``reuse_delay_ms`` covers) revokes our lease at once.
"""

from __future__ import annotations

import logging
import random
import secrets
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_LOG_APPEND_TIME, KafkaError, KafkaException, TopicPartition

from streams.core.errors import WorkerIdLeaseError
from streams.core.ids.lease import (
    LeaseRecord,
    LeaseRecordError,
    LeaseTable,
    LeaseTerms,
    decode_lease_record,
    encode_lease_record,
)
from streams.kafka.admin import TopicAdminError, ensure_topics, id_leases_spec
from streams.kafka.clients import new_consumer, new_producer

__all__ = ["WorkerIdLease", "DEFAULT_ID_LEASES_TOPIC"]

log = logging.getLogger(__name__)

#: Where producers lease Snowflake worker IDs unless told otherwise.
DEFAULT_ID_LEASES_TOPIC = "streams.id-leases"
_ACQUIRE_ATTEMPTS = 32


class WorkerIdLease:
    """Holds one fleet-unique Snowflake worker ID while the process lives (see the module docstring).

    ``client_config``: librdkafka properties of the cluster. ``worker``: the worker ID
    to hold (None: any free one). ``timeout_s``: how long :meth:`acquire` may take.
    Attributes read on the per-event path: :attr:`worker` and :attr:`deadline_ns`
    (``time.monotonic_ns()`` before which the lease is good).
    """

    def __init__(self, client_config: Mapping[str, Any], *, topic: str = DEFAULT_ID_LEASES_TOPIC,
                 terms: LeaseTerms | None = None, worker: int | None = None, timeout_s: float = 30.0,
                 rng: random.Random | None = None) -> None:
        self.topic = topic
        self.terms = terms or LeaseTerms()
        if worker is not None and not (worker.__class__ is int and 0 <= worker <= self.terms.max_worker):
            raise WorkerIdLeaseError(f"worker must be an int in [0, {self.terms.max_worker}], got {worker!r}")
        self._wanted = worker
        self._timeout_s = timeout_s
        self._rng = rng or random.Random(secrets.randbits(64))
        self.owner = f"{socket.gethostname()[:40]}/{secrets.token_hex(8)}"
        self._client = {k: v for k, v in client_config.items() if k != "on_delivery"}
        self._table = LeaseTable(self.terms.reuse_delay_ms)
        self._tp = TopicPartition(topic, 0, OFFSET_BEGINNING)
        self._consumer: Any = None
        self._producer: Any = None
        self._next_offset = 0  # next offset of the leases log to replay
        self.worker: int | None = None
        self.deadline_ns = 0
        self.floor_ms = 0  # the local wall clock must pass this before the first ID (see acquire, step 5)
        self.skipped = 0  # malformed records seen on the leases topic
        self._lost_reason: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- acquiring -----------------------------------------------------------------------------

    def acquire(self) -> int:
        """Obtain a lease (steps 1-5 of the module docstring) and start renewing it; returns the worker ID.

        Raises WorkerIdLeaseError: the cluster cannot be reached or refuses the write
        within ``timeout_s``; the configured worker ID is held by another live
        producer; or every worker ID is taken.
        """
        deadline = time.monotonic() + self._timeout_s
        try:
            ensure_topics(self._client, [id_leases_spec(self.topic)], timeout_s=max(1.0, self._timeout_s / 3))
        except TopicAdminError as exc:
            raise WorkerIdLeaseError(f"cannot use the ID leases topic {self.topic!r}: {exc}") from None
        self._open()
        self._obtain(deadline)
        self._thread = threading.Thread(target=self._renew_loop, name=f"id-lease-{self.worker}", daemon=True)
        self._thread.start()
        return self.worker  # type: ignore[return-value]

    def _open(self) -> None:
        self._producer = new_producer({**self._client, "enable.idempotence": True, "acks": "all",
                                       "linger.ms": 0, "message.timeout.ms": int(self.terms.lease_ms // 2) or 1,
                                       "allow.auto.create.topics": False})
        self._consumer = new_consumer({**self._client, "group.id": f"streams-id-lease-{self.owner}",
                                       "enable.auto.commit": False, "allow.auto.create.topics": False,
                                       "fetch.wait.max.ms": 20, "isolation.level": "read_committed"})
        # Metadata first: a partition assigned before its leader is known waits out librdkafka's
        # offset-query retry (500 ms) before its first fetch, most of a lease's start-up cost.
        try:
            self._consumer.list_topics(self.topic, timeout=max(0.5, self._timeout_s / 3))
        except KafkaException as exc:
            raise WorkerIdLeaseError(f"cannot read the metadata of {self.topic!r}: {exc}") from None
        self._consumer.assign([self._tp])

    def _obtain(self, deadline: float) -> None:
        """Steps 1-5; on return ``worker`` and ``deadline_ns`` describe a lease we hold."""
        for _ in range(_ACQUIRE_ATTEMPTS):
            self._read_to_end(deadline)
            now_ms = time.time_ns() // 1_000_000
            worker = self._wanted
            if worker is None:
                worker = self._table.pick_free(self.terms.max_worker, now_ms, self._rng)
                if worker is None:
                    raise WorkerIdLeaseError(f"all {self.terms.max_worker + 1} Snowflake worker IDs are leased or "
                                             f"resting on {self.topic!r}")
            else:
                held = self._table.holder(worker, now_ms)
                if held is not None and held.owner != self.owner:
                    raise WorkerIdLeaseError(
                        f"snowflake_worker {worker} is leased by {held.owner!r} until {held.expires_ms} "
                        f"(ms since the epoch) on {self.topic!r}: two producers would mint the same IDs",
                        worker_id=worker)
                resting = self._table.leases.get(worker)
                if resting is not None and not self._table.is_free(worker, now_ms):
                    wait_s = (resting.expires_ms + self.terms.reuse_delay_ms - now_ms) / 1000
                    if time.monotonic() + wait_s > deadline:
                        raise WorkerIdLeaseError(f"snowflake_worker {worker} rests until {wait_s:.1f} s from now "
                                                 f"(its last lease just ended) on {self.topic!r}", worker_id=worker)
                    time.sleep(wait_s)
                    continue
            previous = self._table.leases.get(worker)
            sent_ns, offset = self._write(LeaseRecord(worker, self.owner, self.terms.lease_ms), deadline)
            taken = self._read_through(offset, deadline)
            lease = self._table.leases.get(worker)
            if taken and lease is not None and lease.owner == self.owner:
                self.worker = worker
                self.deadline_ns = sent_ns + self.terms.lease_ms * 1_000_000
                self._lost_reason = None
                if previous is not None and previous.owner != self.owner:
                    self.floor_ms = previous.expires_ms + self.terms.reuse_delay_ms // 2
                self._wait_for_floor(deadline)
                log.info("leased Snowflake worker ID %d on %r (owner %s)", worker, self.topic, self.owner)
                return
            if self._wanted is not None and time.monotonic() >= deadline:
                break
        raise WorkerIdLeaseError(f"no Snowflake worker ID could be leased on {self.topic!r} within "
                                 f"{self._timeout_s:g} s", worker_id=self._wanted)

    def _wait_for_floor(self, deadline: float) -> None:
        """Wait until the local clock passes :attr:`floor_ms`: our first ID is later than the previous holder's last."""
        while (wait_ms := self.floor_ms - time.time_ns() // 1_000_000) > 0:
            if time.monotonic() + wait_ms / 1000 > deadline + self.terms.reuse_delay_ms / 1000:
                raise WorkerIdLeaseError(f"the local clock is {wait_ms} ms behind the previous holder of worker ID "
                                         f"{self.worker}: more skew than reuse_delay_ms covers", worker_id=self.worker)
            time.sleep(wait_ms / 1000)

    # -- the log ------------------------------------------------------------------------------

    def _write(self, record: LeaseRecord, deadline: float) -> tuple[int, int]:
        """Write ``record``; returns (monotonic ns just before sending, its offset). Raises WorkerIdLeaseError."""
        result: list[Any] = []
        sent_ns = time.monotonic_ns()
        try:
            self._producer.produce(self.topic, encode_lease_record(record), str(record.worker).encode(), partition=0,
                                   on_delivery=lambda err, msg: result.append((err, msg)))
        except (KafkaException, BufferError) as exc:
            raise WorkerIdLeaseError(f"cannot write to {self.topic!r}: {exc}", worker_id=record.worker) from None
        self._producer.flush(max(0.0, deadline - time.monotonic()))
        if not result:
            raise WorkerIdLeaseError(f"no acknowledgement from {self.topic!r} within {self._timeout_s:g} s",
                                     worker_id=record.worker)
        err, msg = result[0]
        if err is not None:
            raise WorkerIdLeaseError(f"the cluster refused a lease record on {self.topic!r}: {err.str()}",
                                     worker_id=record.worker)
        kind, _ = msg.timestamp()
        if kind != TIMESTAMP_LOG_APPEND_TIME:
            raise WorkerIdLeaseError(f"topic {self.topic!r} must have message.timestamp.type=LogAppendTime: the "
                                     "broker's clock orders the fleet's leases", worker_id=record.worker)
        return sent_ns, msg.offset()

    def _read_to_end(self, deadline: float) -> None:
        """Replay every record up to the log's current end."""
        try:
            _, high = self._consumer.get_watermark_offsets(TopicPartition(self.topic, 0),
                                                           timeout=max(0.1, deadline - time.monotonic()))
        except KafkaException as exc:
            raise WorkerIdLeaseError(f"cannot read {self.topic!r}: {exc}") from None
        self._read_through(high - 1, deadline)

    def _read_through(self, offset: int, deadline: float) -> bool:
        """Replay records up to ``offset``; True if the record at ``offset`` took effect."""
        took = False
        while self._next_offset <= offset:
            if time.monotonic() >= deadline:
                raise WorkerIdLeaseError(f"could not read {self.topic!r} up to offset {offset} in time")
            for msg in self._consumer.consume(500, 0.02):
                if msg.error() is not None:
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        log.debug("leases topic: %s", msg.error())
                    continue
                applied = self._apply(msg)
                if msg.offset() == offset:
                    took = applied
        return took

    def _apply(self, msg: Any) -> bool:
        self._next_offset = msg.offset() + 1
        try:
            record = decode_lease_record(msg.value(), self.terms.max_worker)
        except LeaseRecordError as exc:
            self.skipped += 1
            log.warning("skipped a malformed record at %s[0]@%d: %s", self.topic, msg.offset(), exc)
            return False
        applied = self._table.apply(record, msg.timestamp()[1])
        if applied and record.worker == self.worker and record.owner != self.owner and not record.release:
            self._lose(f"worker ID {record.worker} was taken over by {record.owner!r}: clock skew beyond "
                       "reuse_delay_ms?")
        return applied

    # -- holding --------------------------------------------------------------------------------

    def check(self) -> None:
        """Return if the lease is good now; else raise WorkerIdLeaseError saying why (the generator must stop)."""
        if time.monotonic_ns() < self.deadline_ns:
            return
        reason = self._lost_reason or "it could not be renewed in time"
        raise WorkerIdLeaseError(f"the lease on Snowflake worker ID {self.worker} lapsed ({reason}): minting "
                                 "stopped rather than risk duplicate IDs", worker_id=self.worker)

    def _lose(self, reason: str) -> None:
        if self.deadline_ns:
            log.error("lost the lease on Snowflake worker ID %s: %s", self.worker, reason)
        self._lost_reason = reason
        self.deadline_ns = 0

    def _renew_loop(self) -> None:
        every = self.terms.renew_every_ms / 1000
        while not self._stop.wait(every):
            try:
                if self.deadline_ns and time.monotonic_ns() < self.deadline_ns:
                    self._renew()
                else:
                    self._lose(self._lost_reason or "not renewed before it expired")
                    self._obtain(time.monotonic() + self._timeout_s)
            except WorkerIdLeaseError as exc:
                log.warning("Snowflake worker ID lease: %s", exc)
            except Exception:  # noqa: BLE001 - the thread must live on; the lease lapses by itself
                log.exception("Snowflake worker ID lease: unexpected failure")

    def _renew(self) -> None:
        deadline = min(self.deadline_ns / 1e9, time.monotonic() + self._timeout_s)
        sent_ns, offset = self._write(LeaseRecord(self.worker, self.owner, self.terms.lease_ms),  # type: ignore[arg-type]
                                      deadline)
        if time.monotonic_ns() >= self.deadline_ns:
            return  # acknowledged too late to count: the next round re-acquires through the log
        self.deadline_ns = sent_ns + self.terms.lease_ms * 1_000_000
        try:
            self._read_through(offset, time.monotonic() + 1.0)
        except WorkerIdLeaseError:
            pass  # following the log is a safety net; the acknowledged renewal stands

    def close(self) -> None:
        """Stop renewing and release the worker ID (it rests ``reuse_delay_ms``, then is free); idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self.worker is not None and self.deadline_ns and time.monotonic_ns() < self.deadline_ns:
            try:
                self._write(LeaseRecord(self.worker, self.owner, self.terms.lease_ms, release=True),
                            time.monotonic() + 5)
            except WorkerIdLeaseError as exc:
                log.info("could not release Snowflake worker ID %s (it expires by itself): %s", self.worker, exc)
        self.deadline_ns = 0
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._producer is not None:
            self._producer.flush(1)
            self._producer = None
