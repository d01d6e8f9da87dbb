"""Two narrow changes to how faust-streaming drives its consumer, installed by the worker app.

Both replace one function of a library class in this worker process only, and both
keep faust's semantics; each says why it is needed. They are installed by
:func:`install` at import of :mod:`streams.worker.app`, before faust builds a consumer.

* :func:`cap_fetch_wait`: faust hard-codes aiokafka's ``fetch_max_wait_ms=1500``.
* :func:`direct_delivery`: faust's ``Consumer._drain_messages`` hands each record over
  inside ``Service.wait_first(callback(message), suspend_flow.wait())``, which creates
  four asyncio tasks and an ``asyncio.wait`` per record; profiled (py-spy) on the
  worker benchmark that was the largest single item of faust's per-record cost. The
  replacement awaits the callback directly while no rebalance is under way.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["install", "cap_fetch_wait", "direct_delivery"]

_installed = False


def install() -> None:
    """Install both patches once per process (idempotent); ``STREAMS_FAUST_DIRECT=0`` keeps faust's per-record delivery."""
    global _installed
    if not _installed:
        cap_fetch_wait()
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
    """
    from faust.transport import consumer as faust_consumer

    fetching = faust_consumer.CONSUMER_FETCHING

    async def _drain_messages(self: Any, fetcher: Any) -> None:  # pragma: no cover - run by faust's Fetcher
        callback = self.callback
        getmany = self.getmany
        consumer_should_stop = self._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set  # noqa: SLF001 - as faust's own loop reads it
        suspended = self.suspend_flow.is_set
        get_read_offset = self._read_offset.__getitem__
        set_read_offset = self._read_offset.__setitem__
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
                    async for tp, message in ait:
                        since_yield += 1
                        if since_yield > yield_every:
                            await sleep(0)
                            since_yield = 0
                        offset = message.offset
                        r_offset = get_read_offset(tp)
                        if r_offset is None or offset >= r_offset:
                            gap = offset - (r_offset or 0)
                            if gap > 1 and r_offset and acks_enabled_for(message.topic):
                                await self._add_gap(tp, r_offset + 1, offset)  # noqa: SLF001
                            if commit_every is not None and self._n_acked >= commit_every:  # noqa: SLF001
                                self._n_acked = 0  # noqa: SLF001
                                await self.commit()
                            if suspended():  # a rebalance began: faust's own race
                                await self.wait_first(callback(message), self.suspend_flow.wait())
                            else:
                                await callback(message)
                            set_read_offset(tp, offset)
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

    faust_consumer.Consumer._drain_messages = _drain_messages  # noqa: SLF001
