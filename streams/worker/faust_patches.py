"""Four narrow changes to how faust-streaming drives its consumer, installed by the worker app.

Each replaces one function of a library class in this worker process only, keeps
faust's semantics, and says why it is needed. They are installed by
:func:`install` at import of :mod:`streams.worker.app`, before faust builds a consumer.

* :func:`cap_fetch_wait`: faust hard-codes aiokafka's ``fetch_max_wait_ms=1500``.
* :func:`direct_delivery`: faust's ``Consumer._drain_messages`` hands each record over
  inside ``Service.wait_first(callback(message), suspend_flow.wait())``, which creates
  four asyncio tasks and an ``asyncio.wait`` per record; profiled (py-spy) on the
  worker benchmark that was the largest single item of faust's per-record cost. The
  replacement awaits the callback directly while no rebalance is under way, and it
  does not let a delivery that straddled a seek undo that seek (:class:`ReadOffsets`).
* :func:`refetch_dropped`: faust's ``Consumer.getmany`` drops the rest of a fetched
  batch when the flow stops or the consumer generation changes, after aiokafka has
  already moved its position past those records; nothing fetches them again unless a
  later seek happens to cover them. The replacement notes what it dropped and seeks
  back to it before the next fetch if the position is still past it.
* :func:`skip_empty_commit`: faust's aiokafka driver keeps only the offsets of assigned
  partitions and commits the rest even when none is left; right after a subscription
  change (the worker's bucket-topic resubscription) aiokafka has no assignment at all,
  raises ``IllegalStateError('No partitions assigned')``, and faust crashes the worker.
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["install", "cap_fetch_wait", "direct_delivery", "refetch_dropped", "skip_empty_commit", "ReadOffsets",
           "first_undelivered"]

log = logging.getLogger(__name__)

_installed = False


def install() -> None:
    """Install the patches once per process (idempotent); ``STREAMS_FAUST_DIRECT=0`` keeps faust's per-record delivery."""
    global _installed
    if not _installed:
        cap_fetch_wait()
        refetch_dropped()
        skip_empty_commit()
        if os.environ.get("STREAMS_FAUST_DIRECT", "1") != "0":
            direct_delivery()
        _installed = True


def cap_fetch_wait(max_wait_ms: int = 100) -> None:
    """Cap aiokafka's ``fetch_max_wait_ms`` at ``max_wait_ms``.

    With 1.5 s a partition that had no data when a fetch went out can wait that long
    for its next records, which showed up as 0.5-2 s of consumer lag at a few hundred
    events/s, and hot-key detection inherits every millisecond of it.
    """
    import aiokafka

    original = aiokafka.AIOKafkaConsumer

    class _Consumer(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["fetch_max_wait_ms"] = min(kwargs.get("fetch_max_wait_ms", max_wait_ms), max_wait_ms)
            super().__init__(*args, **kwargs)

    # faust's driver builds its consumer as ``aiokafka.AIOKafkaConsumer(...)``; this worker
    # process owns the module, so replacing the class there is the narrowest hook.
    aiokafka.AIOKafkaConsumer = _Consumer  # type: ignore[misc]


class ReadOffsets(defaultdict):  # type: ignore[type-arg]
    """faust's ``Consumer._read_offset`` (the last offset delivered per partition) that counts outside writes.

    faust's delivery loop reads a partition's read offset, awaits the delivery of one
    record, then stores that record's offset as the new read offset, and skips every
    later-fetched record below it. A rebalance can run during that await (the stream's
    buffer is full, so the delivery waits): it seeks the partition back to its committed
    offset and sets the read offset to match, and the loop's store then puts the old,
    higher offset back. The records re-fetched from the committed offset are all below
    it, so they are skipped: a partition fetched to its end with nothing handed over, or
    (when later records follow) a silent gap. Seen in the two-worker kill test as whole
    partitions that never closed and as slots short by most of their events.

    Every write through the mapping interface (faust's seeks, its revocation, the
    aiokafka driver's ``seek_wait``) bumps the partition's :meth:`version`; the delivery
    loop stores its own offset with :meth:`advance`, which does nothing if the
    partition was written since the loop read its offset. Versions are per partition:
    a skipped store on a partition nobody sought would make faust count the next
    record's predecessor as a gap (treated as acknowledged) before it is acknowledged.
    """

    def __init__(self, *args: Any) -> None:
        self._versions: dict[Any, int] = {}
        self._epoch = 0  # bumped by clear(), which writes every partition
        super().__init__(lambda: None, *args)

    def __missing__(self, tp: Any) -> None:
        return None  # faust's defaultdict(lambda: None), without storing (a read is not a write)

    def version(self, tp: Any) -> tuple[int, int]:
        """A value that changes whenever ``tp``'s read offset is written through the mapping interface."""
        return self._epoch, self._versions.get(tp, 0)

    def _wrote(self, tp: Any) -> None:
        self._versions[tp] = self._versions.get(tp, 0) + 1

    def __setitem__(self, tp: Any, offset: Any) -> None:
        self._wrote(tp)
        super().__setitem__(tp, offset)

    def __delitem__(self, tp: Any) -> None:
        self._wrote(tp)
        super().__delitem__(tp)

    def pop(self, tp: Any, *default: Any) -> Any:
        """As ``dict.pop``, counted as a write of ``tp``."""
        self._wrote(tp)
        return super().pop(tp, *default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        """As ``dict.update``, counted as a write of every partition it sets."""
        for tp, offset in dict(*args, **kwargs).items():
            self[tp] = offset

    def clear(self) -> None:
        """As ``dict.clear``, counted as a write of every partition."""
        self._epoch += 1
        super().clear()

    def advance(self, tp: Any, offset: int, version_seen: tuple[int, int]) -> bool:
        """Store ``offset`` as ``tp``'s read offset unless ``tp`` was written since its version was ``version_seen``."""
        if self.version(tp) != version_seen:
            return False
        dict.__setitem__(self, tp, offset)
        return True


def direct_delivery(yield_every: int = 100) -> None:
    """Await faust's per-record delivery directly in ``Consumer._drain_messages`` while no rebalance is under way.

    What stays as in faust 0.15: records come from ``Consumer.getmany`` (which drops
    records of a superseded consumer generation and of inactive partitions), the
    read-offset gap bookkeeping, ``broker_commit_every``, and the callback per record
    (the conductor, which tracks the record and puts it on its streams' channels).
    While a rebalance has the flow suspended, each record is raced against
    ``suspend_flow`` exactly as faust does. What changes: outside a rebalance the
    callback is awaited directly, without four tasks and an ``asyncio.wait`` around it.
    Records are read from ``getmany`` lazily, one at a time, as faust does: an
    earlier version read a whole batch before delivering it, so records fetched under
    an old generation reached the streams after the rebalance's seek, moved the read
    offset past the re-fetched ones, and the two-worker kill test stalled every time.
    A record's offset becomes the read offset only if no seek came while it was being
    delivered, and only if it was delivered; and once a partition is sought, the rest of
    the batch fetched for it before the seek is not handed over (the seek re-reads it).
    faust 0.15 does neither (see :class:`ReadOffsets`), which lost records after a
    rebalance under load.
    """
    from faust.transport import consumer as faust_consumer

    fetching = faust_consumer.CONSUMER_FETCHING

    async def _drain_messages(self: Any, fetcher: Any) -> None:  # pragma: no cover - run by faust's Fetcher
        callback = self.callback
        getmany = self.getmany
        consumer_should_stop = self._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set  # noqa: SLF001 - as faust's own loop reads it
        suspended = self.suspend_flow.is_set
        if not isinstance(self._read_offset, ReadOffsets):
            self._read_offset = ReadOffsets(self._read_offset)
        set_flag, unset_flag = self.diag.set_flag, self.diag.unset_flag
        commit_every = self._commit_every
        acks_enabled_for = self.app.topics.acks_enabled_for
        sleep = faust_consumer.asyncio.sleep

        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                set_flag(fetching)
                ait = getmany(timeout=1.0)
                await self.sleep(0)  # as faust: getmany may not have released the loop
                if not self.should_stop:
                    since_yield = 0
                    # Read lazily, as faust does: getmany checks the consumer generation
                    # before each record it yields, so nothing fetched under an old
                    # generation is delivered after the rebalance's seek.
                    fetched_at: dict[Any, tuple[int, int]] = {}  # each partition's read-offset version at its fetch
                    async for tp, message in ait:
                        since_yield += 1
                        if since_yield > yield_every:
                            await sleep(0)
                            since_yield = 0
                        offset = message.offset
                        read_offsets = self._read_offset
                        version_seen = read_offsets.version(tp)
                        if fetched_at.setdefault(tp, version_seen) != version_seen:
                            self.log.dev("SKIPPED %r offset %r: fetched before a seek", tp, offset)
                            continue  # fetched before a seek of its partition: the seek re-reads it
                        r_offset = read_offsets[tp]
                        if r_offset is None or offset >= r_offset:
                            gap = offset - (r_offset or 0)
                            if gap > 1 and r_offset and acks_enabled_for(message.topic):
                                await self._add_gap(tp, r_offset + 1, offset)  # noqa: SLF001
                            if commit_every is not None and self._n_acked >= commit_every:  # noqa: SLF001
                                self._n_acked = 0  # noqa: SLF001
                                await self.commit()
                            if suspended():  # a rebalance began: faust's own race
                                delivery = callback(message)
                                outcome = await self.wait_first(delivery, self.suspend_flow.wait())
                                if delivery not in outcome.done:
                                    self.log.dev("UNDELIVERED %r offset %r: the flow stopped", tp, offset)
                                    continue  # not delivered: the rebalance's seek re-reads it
                            else:
                                await callback(message)
                            read_offsets.advance(tp, offset, version_seen)
                        else:
                            self.log.dev("DROPPED MESSAGE ROFF %r %r: below the read offset %r", tp, offset, r_offset)
                unset_flag(fetching)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                self.log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except faust_consumer.asyncio.CancelledError:
            if self.transport.app.should_stop:
                self.log.info("Consumer shutting down for user cancel.")
                return
            raise
        except Exception as exc:
            self.log.exception("Drain messages raised: %r", exc)
            raise
        finally:
            unset_flag(fetching)

    _drain_messages.__wrapped__ = faust_consumer.Consumer._drain_messages  # type: ignore[attr-defined]  # noqa: SLF001
    faust_consumer.Consumer._drain_messages = _drain_messages  # noqa: SLF001


def first_undelivered(records: Mapping[Any, Iterable[Any]], delivered: Mapping[Any, int]) -> dict[Any, int]:
    """Per partition of a fetched batch, the offset of its first record after the last one ``delivered`` (if any)."""
    out: dict[Any, int] = {}
    for tp, batch in records.items():
        last = delivered.get(tp)
        for record in batch:
            if last is None or record.offset > last:
                out[tp] = record.offset
                break
    return out


def refetch_dropped() -> None:
    """Make faust's ``Consumer.getmany`` fetch again the records it drops, instead of losing them.

    faust 0.15's ``getmany`` stops yielding a fetched batch when the flow stops or the
    consumer generation changes (a rebalance began), and skips records of partitions no
    longer active. aiokafka moved its position past the whole batch when it returned it,
    so the dropped records are read again only if a seek covers them: the rebalance's
    seek to the committed offsets does when it comes after the fetch, but when the fetch
    was already under way it can come before, and then the partition's records sit
    fetched and unhanded until some later rebalance (seen as partitions "fetched to the
    end, nothing handed over" in the two-worker kill test). This version is faust's,
    plus bookkeeping: it notes each partition's first dropped offset, and at its next
    call, once the flow is active again, seeks every still-assigned partition whose
    position is past that offset back to it. A record handed over twice this way is
    harmless here (stage 1 skips offsets it folded; stage 2 upserts).
    """
    from faust.transport import consumer as faust_consumer

    async def getmany(self: Any, timeout: float) -> Any:  # pragma: no cover - run by faust's Fetcher
        dropped: dict[Any, int] = self.__dict__.setdefault("_streams_dropped", {})
        if dropped and self.flow_active and not self.suspend_flow.is_set():
            await _seek_back(self, dropped)
        records, active_partitions = await self._wait_next_records(timeout)
        generation_id = self.app.consumer_generation_id
        if records is None or self.should_stop:
            return
        if not self.flow_active:
            self.log.dev("getmany called while flow not active. Seek back to committed offsets.")
            try:
                await self.perform_seek()
            except Exception as ex:  # noqa: BLE001 - as faust: logged, the next rebalance seeks again
                self.log.warning(f"exception performing seek when flow not active {ex}")
            return
        delivered: dict[Any, int] = {}
        to_message = self._to_message
        try:
            for tp, record in self.scheduler.iterate(records):
                if not self.flow_active or self.app.consumer_generation_id != generation_id:
                    break
                if active_partitions is None or tp in active_partitions or tp in self._buffered_partitions:
                    self.app.monitor.track_tp_end_offset(tp, self.highwater(tp))
                    delivered[tp] = record.offset
                    yield tp, to_message(tp, record)
        finally:
            for tp, offset in first_undelivered(records, delivered).items():
                dropped[tp] = min(offset, dropped.get(tp, offset))

    getmany.__wrapped__ = faust_consumer.Consumer.getmany  # type: ignore[attr-defined]
    faust_consumer.Consumer.getmany = getmany


async def _seek_back(consumer: Any, dropped: dict[Any, int]) -> None:  # pragma: no cover - run by faust's Fetcher
    """Seek each still-assigned partition whose position is past its first dropped record back to that record."""
    assigned = consumer.assignment()
    for tp, offset in list(dropped.items()):
        del dropped[tp]
        if tp not in assigned:
            continue  # revoked: its next owner starts from the committed offset
        position = await consumer.position(tp)
        if position is not None and position > offset:
            log.warning("%s[%d]: faust dropped fetched records from offset %d (position %d): fetching them again",
                        tp.topic, tp.partition, offset, position)
            await consumer.seek(tp, offset)


def skip_empty_commit() -> None:
    """Make faust's aiokafka ``Consumer._commit`` a no-op (False: nothing committed) when no offset is of an assigned partition.

    faust filters the offsets by the current assignment and then always calls
    aiokafka's ``commit``. Between a subscription change and the rebalance that
    follows it aiokafka has no assignment; its ``commit`` then raises
    ``IllegalStateError`` even for no offsets, and faust answers that by crashing
    the worker (seen once in eight runs of the topic-per-bucket test). With nothing
    assigned there is nothing to commit: the partitions' next owners commit them.
    """
    from faust.transport.drivers import aiokafka as faust_aiokafka

    thread_class = faust_aiokafka.AIOKafkaConsumerThread
    original = thread_class._commit  # noqa: SLF001

    async def _commit(self: Any, offsets: Mapping[Any, int]) -> bool:
        assigned = self.assignment()
        if not any(tp in assigned for tp in offsets):
            return False
        return await original(self, offsets)

    thread_class._commit = _commit  # noqa: SLF001

