"""The delivery loop's read offsets (streams.worker.faust_patches.ReadOffsets): a delivery that
straddled a seek must not put the pre-seek offset back.

The race it closes, as seen in the two-worker kill test: the loop reads a partition's read
offset, awaits the delivery of record 120 (the stream's buffer is full), a rebalance seeks
the partition back to its committed offset 100 meanwhile, and the loop then stores 120. faust
skips every re-fetched record below the stored offset, so records 100..119 were never handed
over. These tests drive the mapping the way faust's seek paths and the loop do.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from types import SimpleNamespace
from typing import Any, NamedTuple

from faust.types import TP as FaustTP

from streams.worker.faust_patches import ReadOffsets

TP = FaustTP("events", 3)
OTHER = FaustTP("events", 4)


def test_a_seek_during_a_delivery_wins_over_the_loops_store() -> None:
    offsets = ReadOffsets({TP: 119})
    seen = offsets.version(TP)  # the loop reads the offset before delivering record 120
    offsets.update({TP: 100})  # perform_seek during the delivery: back to the committed offset
    assert offsets.advance(TP, 120, seen) is False
    assert offsets[TP] == 100  # so records 100..119, re-fetched, are delivered again


def test_without_a_seek_the_loop_advances_the_offset() -> None:
    offsets = ReadOffsets({TP: 119})
    seen = offsets.version(TP)
    assert offsets.advance(TP, 120, seen) is True
    assert offsets[TP] == 120
    assert offsets.advance(TP, 121, offsets.version(TP)) is True  # the loop's own stores are not writes
    assert offsets[TP] == 121


def test_every_faust_write_path_counts_as_a_write() -> None:
    writes = [
        lambda o: o.__setitem__(TP, 100),  # Consumer.seek and the aiokafka driver's _seek_wait
        lambda o: o.update({TP: 100}),  # Consumer.perform_seek
        lambda o: o.pop(TP, None),  # on_partitions_revoked
        lambda o: o.__delitem__(TP),  # _seek_wait to offset 0
        lambda o: o.clear(),
    ]
    for write in writes:
        offsets = ReadOffsets({TP: 119})
        seen = offsets.version(TP)
        write(offsets)
        assert offsets.advance(TP, 120, seen) is False, write
        assert offsets.get(TP) != 120


def test_a_write_to_another_partition_does_not_block_this_one() -> None:
    # A blocked store would leave the offset one behind, and faust would count the next
    # record's predecessor as a gap (acknowledged) before the worker acknowledged it.
    offsets = ReadOffsets({TP: 119, OTHER: 50})
    seen = offsets.version(TP)
    offsets[OTHER] = 40
    assert offsets.advance(TP, 120, seen) is True
    assert offsets[TP] == 120


def test_it_reads_like_fausts_defaultdict_and_a_read_is_not_a_write() -> None:
    faust_default: defaultdict = defaultdict(lambda: None, {TP: 7})
    offsets = ReadOffsets(faust_default)
    assert offsets[TP] == 7 and offsets[OTHER] is None and faust_default[OTHER] is None
    seen = offsets.version(OTHER)
    assert offsets[OTHER] is None  # reading a missing partition stores nothing
    assert OTHER not in offsets
    assert offsets.advance(OTHER, 0, seen) is True


# --- the delivery loop itself, driven by a scripted consumer --------------------------------


class _Flag:
    def __init__(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True

    async def wait(self) -> None:  # pragma: no cover - never awaited: the flow is never suspended here
        raise AssertionError("suspend_flow awaited")


class _WaitResults(NamedTuple):
    done: list
    results: list
    stopped: bool


class _Record(NamedTuple):
    offset: int
    topic: str = TP[0]
    key: bytes = b""
    value: bytes = b""


class _ScriptedConsumer:
    """What faust's ``Consumer._drain_messages`` reads from ``self``, with scripted fetches.

    Fetch 1 returns offsets 100..104. Delivering 102 blocks (the stream's buffer is full)
    while a rebalance runs: faust clears the streams' buffers (so 100..102, handed over
    but unprocessed, are gone) and seeks back to the committed offset 100. Fetch 2 is what
    the consumer then reads: 100..105 again. Everything from 100 on must be handed over
    after the seek, or those records are never processed.
    """

    consumer_stopped_errors = ()
    should_stop = False
    _commit_every = None
    _n_acked = 0

    def __init__(self) -> None:
        self._stopped = _Flag()
        self.suspend_flow = _Flag()
        self.diag = SimpleNamespace(set_flag=lambda flag: None, unset_flag=lambda flag: None)
        self.app = SimpleNamespace(topics=SimpleNamespace(acks_enabled_for=lambda topic: True))
        self.transport = SimpleNamespace(app=SimpleNamespace(should_stop=False))
        self.log = SimpleNamespace(info=print, exception=print, dev=lambda *a: None)
        self._read_offset: defaultdict = defaultdict(lambda: None, {TP: 99})
        self.fetches = [list(range(100, 105)), list(range(100, 106))]
        self.after_seek: list[int] | None = None
        self.gaps: list[tuple[int, int]] = []

    async def sleep(self, _s: float) -> None:
        await asyncio.sleep(0)

    async def getmany(self, timeout: float) -> Any:
        if not self.fetches:
            self._stopped.set()
            return
        for offset in self.fetches.pop(0):
            yield TP, _Record(offset)

    async def callback(self, message: _Record) -> None:
        if self.after_seek is not None:
            self.after_seek.append(message.offset)
        elif message.offset == 102:
            await asyncio.sleep(0)  # the delivery waits; the rebalance runs meanwhile
            self._read_offset.update({TP: 100})  # Consumer.perform_seek: back to the committed offset
            self.after_seek = []  # faust cleared the streams' buffers: only what comes now is processed

    async def _add_gap(self, tp: Any, start: int, end: int) -> None:
        self.gaps.append((start, end))

    async def wait_first(self, *coros: Any) -> _WaitResults:
        result = await coros[0]
        coros[1].close()
        return _WaitResults([coros[0]], [result], False)


def _drain(drain_messages: Any) -> _ScriptedConsumer:
    consumer = _ScriptedConsumer()
    fetcher = SimpleNamespace(_stopped=_Flag())
    asyncio.run(drain_messages(consumer, fetcher))
    return consumer


def _patched_and_fausts_own() -> tuple[Any, Any]:
    from faust.transport import consumer as faust_consumer

    from streams.worker import faust_patches

    faust_patches.install()
    patched = faust_consumer.Consumer._drain_messages  # noqa: SLF001
    return patched, patched.__wrapped__


def test_the_patched_loop_hands_over_every_record_re_fetched_after_a_seek_during_a_delivery() -> None:
    patched, _ = _patched_and_fausts_own()
    consumer = _drain(patched)
    # 103 and 104 of the first fetch were fetched before the seek: the seek re-reads them.
    assert consumer.after_seek == list(range(100, 106))
    assert consumer.gaps == []


def test_fausts_own_loop_loses_the_records_re_fetched_below_the_offset_it_put_back() -> None:
    # The oracle for the bug: faust 0.15's loop stores 102 after the seek, so 100 and 101 are
    # dropped ("DROPPED MESSAGE ROFF") when fetched again, and the commit later passes them.
    _, fausts_own = _patched_and_fausts_own()
    consumer = _drain(fausts_own)
    assert not {100, 101} & set(consumer.after_seek)


# --- getmany: records dropped mid-batch are fetched again ------------------------------------


def test_first_undelivered_is_the_record_after_the_last_one_handed_over() -> None:
    from streams.worker.faust_patches import first_undelivered

    batch = {TP: [_Record(o) for o in range(10, 15)], OTHER: [_Record(o) for o in range(3, 5)]}
    assert first_undelivered(batch, {TP: 11}) == {TP: 12, OTHER: 3}
    assert first_undelivered(batch, {TP: 14, OTHER: 4}) == {}
    assert first_undelivered({TP: []}, {}) == {}


class _FetchingConsumer:
    """What faust's ``Consumer.getmany`` reads from ``self``: a batch of offsets 10..14 whose
    consumer generation changes after two records (a rebalance began), a position past the
    whole batch (aiokafka moved it when it returned the batch), and no seek by the rebalance
    after the fetch."""

    should_stop = False
    flow_active = True

    def __init__(self) -> None:
        self.app = SimpleNamespace(consumer_generation_id=1, monitor=SimpleNamespace(track_tp_end_offset=lambda *a: None))
        self.suspend_flow = _Flag()
        self.scheduler = SimpleNamespace(iterate=lambda records: ((tp, r) for tp, rs in records.items() for r in rs))
        self._buffered_partitions: set = set()
        self.log = SimpleNamespace(dev=lambda *a: None, warning=print)
        self.positions = {TP: 15}
        self.sought: list[tuple[Any, int]] = []
        self.batches = [{TP: [_Record(o) for o in range(10, 15)]}, {}]

    async def _wait_next_records(self, timeout: float) -> tuple[dict, None]:
        return self.batches.pop(0), None

    def highwater(self, tp: Any) -> int:
        return 15

    def _to_message(self, tp: Any, record: _Record) -> _Record:
        if record.offset == 11:
            self.app.consumer_generation_id = 2  # the rebalance starts while 11 is handed over
        return record

    def assignment(self) -> set:
        return {TP}

    async def position(self, tp: Any) -> int:
        return self.positions[tp]

    async def seek(self, tp: Any, offset: int) -> None:
        self.sought.append((tp, offset))
        self.positions[tp] = offset


async def _collect(getmany: Any, consumer: _FetchingConsumer) -> list[int]:
    return [message.offset async for _tp, message in getmany(consumer, 1.0)]


def test_getmany_seeks_back_to_the_records_a_generation_change_made_it_drop() -> None:
    from faust.transport import consumer as faust_consumer

    from streams.worker import faust_patches

    faust_patches.install()
    consumer = _FetchingConsumer()
    assert asyncio.run(_collect(faust_consumer.Consumer.getmany, consumer)) == [10, 11]
    assert consumer.sought == []  # nothing yet: the rebalance may still seek
    asyncio.run(_collect(faust_consumer.Consumer.getmany, consumer))
    assert consumer.sought == [(TP, 12)]  # the position was still past them: fetch 12.. again


def test_fausts_getmany_drops_them_and_never_seeks() -> None:
    # The oracle for the bug: faust 0.15 drops 12..14 and does nothing more.
    from faust.transport import consumer as faust_consumer

    from streams.worker import faust_patches

    faust_patches.install()
    consumer = _FetchingConsumer()
    fausts_own = faust_consumer.Consumer.getmany.__wrapped__
    assert asyncio.run(_collect(fausts_own, consumer)) == [10, 11]
    asyncio.run(_collect(fausts_own, consumer))
    assert consumer.sought == []


def test_getmany_does_not_seek_when_the_rebalance_already_sought_below_the_dropped_records() -> None:
    from faust.transport import consumer as faust_consumer

    from streams.worker import faust_patches

    faust_patches.install()
    consumer = _FetchingConsumer()
    asyncio.run(_collect(faust_consumer.Consumer.getmany, consumer))
    consumer.positions[TP] = 8  # the rebalance's seek to the committed offset came after the fetch
    asyncio.run(_collect(faust_consumer.Consumer.getmany, consumer))
    assert consumer.sought == []


def test_a_commit_with_no_assigned_partition_left_commits_nothing_instead_of_crashing_the_worker() -> None:
    """Right after a resubscription aiokafka has no assignment; faust's own _commit then crashes the worker."""
    from aiokafka.errors import IllegalStateError
    from faust.transport.drivers import aiokafka as faust_aiokafka

    from streams.worker import faust_patches

    calls: list[dict[Any, int]] = []

    async def original(self: Any, offsets: dict[Any, int]) -> bool:  # faust's behaviour, reduced to the crash
        calls.append(dict(offsets))
        if not self.assignment():
            raise IllegalStateError("No partitions assigned")
        return True

    thread_class = faust_aiokafka.AIOKafkaConsumerThread
    saved = thread_class._commit
    thread_class._commit = original
    try:
        faust_patches.skip_empty_commit()
        patched = thread_class._commit
        between = SimpleNamespace(assignment=lambda: set())
        assert asyncio.run(patched(between, {TP: 120})) is False and calls == []
        assigned = SimpleNamespace(assignment=lambda: {TP})
        assert asyncio.run(patched(assigned, {TP: 120, OTHER: 7})) is True and calls == [{TP: 120, OTHER: 7}]
    finally:
        thread_class._commit = saved
